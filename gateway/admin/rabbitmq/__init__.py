"""RabbitMQ's management HTTP API (the 3.10 shapes), the part that tools and scripts use, served on
the admin port under /api/ beside the gateway's own /api/v1: `rabbitmqadmin`, monitoring agents and
definition files work against the gateway as against a RabbitMQ node.

vhosts.py maps vhosts to namespaces and keeps %2F inside a path segment; shapes.py turns the core's
objects into RabbitMQ's documents; queries.py reads, changes.py declares and deletes, messages.py
publishes and gets, definitions.py exports and imports; app.py is the thin HTTP layer.
"""
