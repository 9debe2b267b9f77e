"""The crawler's public PTransforms and their DoFns.

Importing this package registers the coders of the records that cross the store stage's
shuffles (pipeline.transforms.coders) before any graph that uses them is built: every module
that builds a graph imports a transform from here first.
"""

from pipeline.transforms.coders import register_record_coders

register_record_coders()
