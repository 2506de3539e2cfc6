"""The faces users construct, one per file: GlobalStore, SharedStore, ReadOnlyStore and
SwitchingStore."""
