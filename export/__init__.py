"""Writers of a stored trace: Chrome JSON (opens in Perfetto) and Parquet, and the export command."""
