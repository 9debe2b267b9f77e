"""The frontier of a local crawl run by several worker processes: one topic per worker, and a
publisher that sends each part of a frontier message to the topic of the worker that owns its
politeness keys (pipeline.core.worker_shares).

Why topics and not one topic with filtered subscriptions, as Pub/Sub offers: the Pub/Sub
emulator stores a subscription's filter but does not apply it (every subscription gets every
message; docs/design.md, "Local and cloud"), so on this machine a filter would let every worker
read every key. A topic per worker is what the emulator does honour.

This is local only, as the runner patches in pipeline/local/direct_runner.py are: the graph
publishes to its one frontier topic, and `RoutingPublisher` (installed as the process's
publisher through pipeline.transforms.resources for a worker of a multi-process run) sends
the message on to the owners' topics. The Dataflow job has no such publisher and one topic.

The frontier's balance (pipeline.core.crawl_states.FrontierBalance) counts a message
published on one side and each message decoded on the other: a message cut into k parts is k
messages to decode, so k are counted published. The answer to a message published in parts
says how many it became (`messages`), and the graph's publisher counts that many, in the
bundle's counts like any other (pipeline.transforms.counts), once every part is acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.core.politeness_keys import host_key_function, key_function
from pipeline.core.worker_shares import split_payload
from pipeline.io.pubsub import MESSAGE_ID


@dataclass(frozen=True)
class FrontierRouter:
    """The topics of a crawl run by `workers` processes: `{frontier_topic}-w{i}` in `project`,
    and which of them each part of a payload goes to."""

    project: str
    frontier_topic: str  # the one topic the graph publishes to (a name, not a path)
    workers: int
    politeness_key: str = "host"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")

    @property
    def topic_path(self) -> str:
        """The path the graph publishes to, which this router reads as the frontier."""
        return f"projects/{self.project}/topics/{self.frontier_topic}"

    def topic_name(self, worker: int) -> str:
        return f"{self.frontier_topic}-w{worker}"

    def subscription_name(self, worker: int, run_tag: str) -> str:
        """Worker `worker`'s subscription in the run `run_tag`: fresh per run, as the emulator
        hides some messages of a cancelled pull for a while."""
        return f"{self.frontier_topic}-w{worker}-{run_tag}"

    def parts(self, data: bytes) -> tuple[str | None, list[tuple[str, bytes]]]:
        """The payload's crawl id (None if unreadable) and (topic path, payload) per part."""
        crawl_id, parts = split_payload(
            data, self.workers, key_of=key_function(self.politeness_key),
            key_of_host=host_key_function(self.politeness_key))
        return crawl_id, [(f"projects/{self.project}/topics/{self.topic_name(owner)}", part)
                          for owner, part in parts]


class _AllParts:
    """The answer to a message published in parts: `result()` once every part is taken;
    `messages`, how many messages the one published became."""

    def __init__(self, futures: list[Any]) -> None:
        self._futures = futures
        self.messages = len(futures)

    def result(self, timeout: float | None = None) -> list[str]:
        return [future.result(timeout=timeout) for future in self._futures]

    def done(self) -> bool:
        return all(future.done() for future in self._futures)


class RoutingPublisher:
    """A Pub/Sub publisher that sends what is published to the frontier topic on to its owners'
    topics (FrontierRouter); anything else (dead letters, page events) goes as it is. A
    message cut in parts is answered by one future for them all, whose `messages` says how
    many parts it became."""

    def __init__(self, publisher: Any, router: FrontierRouter) -> None:
        self._publisher = publisher
        self._router = router
        self._topic = router.topic_path

    def publish(self, topic: str, data: bytes, **attributes: str) -> Any:
        if topic != self._topic:
            return self._publisher.publish(topic, data, **attributes)
        crawl_id, parts = self._router.parts(data)
        message_id = attributes.get(MESSAGE_ID)
        futures = []
        for i, (part_topic, payload) in enumerate(parts):
            attrs = dict(attributes)
            if message_id is not None and len(parts) > 1:
                attrs[MESSAGE_ID] = f"{message_id}.{i}"  # each part is a message of its own
            futures.append(self._publisher.publish(part_topic, payload, **attrs))
        if len(futures) == 1:
            return futures[0]
        assert crawl_id is not None  # only a readable message is cut
        return _AllParts(futures)

    def __getattr__(self, name: str) -> Any:  # stop(), transport, ...: the client's own
        return getattr(self._publisher, name)
