"""The launch sequence shared by both front ends: the session, its steps and the verdict of
the checks."""
