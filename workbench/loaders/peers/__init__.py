"""Peers: other projects' loaders on our data, registered like ours so they are measured side by side."""
