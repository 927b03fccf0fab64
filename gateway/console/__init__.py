"""The web console: static pages served on the admin port, talking to the REST API."""
