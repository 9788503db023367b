"""The client floor: talking to a JobMaster, the executors behind ``env.execute()``, and
the in-process mini cluster."""
