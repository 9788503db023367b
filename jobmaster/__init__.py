"""The JobMaster daemon: dispatcher, resource manager, scheduler and execution graph."""
