"""The TaskExecutor daemon: slots, tasks (one mailbox thread each) and operator chains."""
