"""The ftopt command line: parse, call one library function, hand the result to a report module."""
