"""Stand-ins for the services ccadapter talks to (cc-backend), for tests and benchmarks."""
