"""Reports rendered from stored results, apart from running: one module per format, ``stored`` reads them."""
