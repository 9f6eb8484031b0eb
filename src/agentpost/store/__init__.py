"""Schema, migrations, queries and the change signal (SQLAlchemy Core; SQLite and PostgreSQL).

May import the domain and `agentpost.config`; never the services or a face.
"""
