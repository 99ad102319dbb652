"""The files ftopt reads and the errors it raises: schemas, YAML, catalogs, measurements, importers."""
