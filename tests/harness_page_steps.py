"""A page step for tests of the graph: it marks the row of every page whose text is kept, so a
test can see the step ran on a page, on any runner. It lives in an importable module (not a
test module) because a runner that pickles the graph, Dataflow's workers among them, imports
it by name: as a user's own step would be installed next to the crawler."""

from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipeline.core.pages import StoredPage


def mark_page(page: StoredPage, mark: str) -> StoredPage:
    if page.text is None:
        return page
    return dataclasses.replace(page, row=dataclasses.replace(page.row, reason=mark))


class MarkPages(beam.PTransform):
    """StoredPage -> StoredPage: each page with text gets `mark` as its row's reason."""

    def __init__(self, mark: str) -> None:
        super().__init__()
        self.mark = mark

    def expand(self, pages):
        return pages | "MarkRows" >> beam.Map(mark_page, self.mark).with_output_types(StoredPage)
