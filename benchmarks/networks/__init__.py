"""The networks a run trains: ImageNet backbones and their weights, the frozen trunk and its
cached features, the layout changes that make the small top cheaper (shrink)."""
