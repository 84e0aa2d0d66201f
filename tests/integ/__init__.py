"""The acceptance test on a real account (``make integ``) and its offline snapshot (``make test``)."""
