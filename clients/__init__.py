"""The client agent: CSV -> counts -> masked upload, over REST to both servers."""
