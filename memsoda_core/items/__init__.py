"""Items: key-addressed documents over facts (what `MemsodaStore` stores), in one place: their values
and pure checks (`values`), SQL (`statements`), operations (`operations`) and the operation builders
`AsyncMemory` and `Memory` call (`calls`)."""
