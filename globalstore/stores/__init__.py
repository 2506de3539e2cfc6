"""The stores users construct: Store written once over a source (store.py), the sources (in
this process, another process's writer, files, a switch), and the public faces over them:
GlobalStore, SharedStore, ReadOnlyStore and SwitchingStore."""
