"""Sources in the FLIP-27 shape: an enumerator in the JobMaster, readers in the tasks."""
