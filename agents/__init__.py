"""The Faust app of jobstream and its agents, tables and timers (run by ``jobstream worker``)."""
