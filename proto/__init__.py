"""Wire contracts: the .proto files and their generated modules (regenerate with `make proto`)."""
