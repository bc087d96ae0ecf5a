"""The store's read side: consume-queue and commitlog readers, index lookups, the pull path
(``columns``) and the filter bitmap reader. Nothing here takes the put lock or writes a byte: a
reader trusts only what the writer published."""
