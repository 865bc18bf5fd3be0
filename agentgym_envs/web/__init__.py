"""Browser environments and the local web sites they drive."""
