"""The crawler's pure core: decisions and data, with no Beam, no network and no files.

URL normalisation and hashing, which IP addresses are public destinations, robots.txt policy,
the host politeness state machine, Bloom seen-sets, traps, page parsing and text fingerprints,
near-duplicate policy, the page-budget arithmetic, the records that cross stage boundaries,
the per-page logic the store stage applies, and the audit of a crawl's own request record.
Everything here is plain Python tested with plain unit and property tests; it imports nothing
else of the project, so the Beam shell (`pipeline.transforms`), the adapters (`pipeline.io`)
and any other runner can build on it.
"""
