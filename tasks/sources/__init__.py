"""Where ``ingest`` reads from: files and built-in data sets (``files``), Hive-partitioned
directories read whole, by window or incrementally (``partitions``), and SQL databases
read in parallel with Ray Data (``sql``). ``router`` picks the reader a call needs.

Sources read data and write data sets; they ask the registry nothing and import no step.
"""
