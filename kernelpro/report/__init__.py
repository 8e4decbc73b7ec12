"""`kernelpro report`: the HTML page (html) and its hand-drawn plots (svg)."""
