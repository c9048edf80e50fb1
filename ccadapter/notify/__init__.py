"""Job notifications on NATS, in the line-protocol form cc-backend ingests."""
