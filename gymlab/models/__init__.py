"""Model servers: anything that answers POST /v1/responses."""
