"""The scout/executor demo: two processes, one memory."""
