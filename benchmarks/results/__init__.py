"""What a run writes and how it is read and shown: the results files, tables, plots,
README blocks, intervals and claims. Imports neither Avalanche nor the runner."""
