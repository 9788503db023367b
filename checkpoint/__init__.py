"""Checkpoint storage (file:// and s3://) and, later, checkpoint coordination."""
