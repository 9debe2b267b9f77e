"""The host state's stored form (pipeline.core.host_state_coder): fields by name, plain values,
and every layout version a running job may hold read back."""

from __future__ import annotations

import base64
import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core import host_state_coder as coder
from pipeline.core.duplicate_slowdown import DuplicateSlowdown
from pipeline.core.fleet_host import FleetHostState, Tombstone
from pipeline.core.host_backlog import HostBacklog
from pipeline.core.host_backoff import HostBackoff
from pipeline.core.host_limits import HostLimits
from pipeline.core.host_queue import HostQueue
from pipeline.core.politeness import FetchReport, HostPolicy, HostState, Lease, LeaseKind
from pipeline.core.records import FrontierEntry
from pipeline.core.robots import RobotsPolicy
from pipeline.core.robots_gate import RobotsGate
from pipeline.core.robots_relay import AwaitedRobots, RobotsFetch, RobotsQuery, RobotsRelay
from pipeline.core.urls import url_hash

H = "www.example.test"
POLICY = HostPolicy(user_agent="testbot", min_delay=1.0, fetch_timeout=5.0, lease_grace=1.0,
                    queue_cap=8, circuit_failures=3)

# ------------------------------------------------------------------- frozen samples
# What the `fleet_host` cell held, as Beam's PickleCoder encoded it, for the states that
# expected_state() and expected_fleet() describe. Version 1 was written by the code before
# the versioned coder (HostState.stored and FleetHostState.stored as they were then) from
# states built field by field; version 2 by encode_host and encode_fleet when they came.
# Never regenerate a sample: a release must read what earlier ones stored.
HOST_V1_CELL = (
    "gAWVxAYAAAAAAAB9lCiMBGhvc3SUjBB3d3cuZXhhbXBsZS50ZXN0lIwGc2NoZW1llIwFaHR0cHOUjAZyb2JvdHOU"
    "jBRwaXBlbGluZS5jb3JlLnJvYm90c5SMDFJvYm90c1BvbGljeZSTlCiMBXJ1bGVzlEdAj0AAAAAAAEvITkM5eJwL"
    "LU4t0k1MT80rsVLQ4nLJLE7Myckvt1LQLyjKLEssSdXnci5KLM/RTUnNSay0UjDmAgChXRAylEMQoCor3dfoE5xd"
    "F6Pd3PJe/ZRLMXSUUpSMDG5leHRfYWxsb3dlZJRHQI+UAAAAAACMD2xhc3RfcmVxdWVzdF9hdJRHQI9oAAAAAACM"
    "BWxlYXNllIwYcGlwZWxpbmUuY29yZS5wb2xpdGVuZXNzlIwFTGVhc2WUk5QpgZRdlCiMB2xlYXNlLTGUaBGMCUxl"
    "YXNlS2luZJSTlIwEcGFnZZSFlFKUjBpodHRwczovL3d3dy5leGFtcGxlLnRlc3QvcJRHQI9oAAAAAABHQJBUAAAA"
    "AACMFXBpcGVsaW5lLmNvcmUucmVjb3Jkc5SMDUZyb250aWVyRW50cnmUk5QpgZRdlCiMGmh0dHBzOi8vd3d3LmV4"
    "YW1wbGUudGVzdC9wlEsHSwFLAUsAR0AAAAAAAAAAiGViSwCIR0A+AAAAAAAAZWKMDHBhZ2VzX2lzc3VlZJRLDIwU"
    "Y29uc2VjdXRpdmVfZmFpbHVyZXOUSwOMDHBhcmtlZF91bnRpbJRHQLH4AAAAAACMDmNhbGVuZGFyX3BhZ2VzlEsE"
    "jApidXN5X3NpbmNllEdAjzgAAAAAAIwPcm9ib3RzX3JlZGlyZWN0lIwkaHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0"
    "L3JvYm90czIudHh0lIwLcm9ib3RzX2hvcHOUSwKMB3dha2VfYXSUR0CQVAAAAAAAjAxsYXN0X2VsYXBzZWSURz/Q"
    "AAAAAAAAjBljcmF3bF9kZWxheV9jYXBwZWRfbG9nZ2VklIiMD2R1cGxpY2F0ZV9oZWF2eZSIjAdibG9ja2VklIwc"
    "YmxvY2tlZCBhZGRyZXNzICgxMC4wLjAuMC84KZSMDWJsb2NrZWRfdW50aWyUR0D1VoAAAAAAjBBvdmVyZmxvd193"
    "cml0dGVulEsFjA1vdmVyZmxvd19yZWFklEsDjBBvdmVyZmxvd19kZWxldGVklEsCjA1vdmVyZmxvd191cmxzlEuW"
    "jA1sYXN0X2VuZGVkX2F0lEdAj2oAAAAAAIwOcm9ib3RzX2F3YWl0ZWSUjBpwaXBlbGluZS5jb3JlLnJvYm90c19y"
    "ZWxheZSMDUF3YWl0ZWRSb2JvdHOUk5QpgZRdlCiMCGVycmFuZC0xlIwdaHR0cHM6Ly9vdGhlci50ZXN0L3JvYm90"
    "cy50eHSUjApvdGhlci50ZXN0lEsBR0CSwAAAAAAAZWKMC3JvYm90c19kZXNrlGg4jApSb2JvdHNEZXNrlJOUKYGU"
    "fZQojAd3YWl0aW5nlH2UjCNodHRwczovL3d3dy5leGFtcGxlLnRlc3Qvcm9ib3RzLnR4dJRdlIwKYXNrZXIudGVz"
    "dJSMCGVycmFuZC05lIaUYXOMB2Fuc3dlcnOUfZSMI2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9yb2JvdHMudHh0"
    "lGg4jAtSb2JvdHNGZXRjaJSTlCmBlF2UKIwjaHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3JvYm90cy50eHSUaAgo"
    "jAlhbGxvd19hbGyUR0CPSAAAAAAATS0BTkMAlGhVSwB0lFKUjCRodHRwczovL3d3dy5leGFtcGxlLnRlc3Qvcm9i"
    "b3RzMi50eHSUZWJzdWKMDXNpdGVtYXBzX3JlYWSUR0CPQAAAAAAAjAVxdWV1ZZQoSwBLAEsAaFVLAEIfAQAAZAAA"
    "AAAAAAACAAAAAAAAAAEAAAAbAAAAaHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3EwZQAAAAAAAAACAAAAAQAAAAEA"
    "AAAbAAABAAAAAAAA4D9odHRwczovL3d3dy5leGFtcGxlLnRlc3QvcTFmAAAAAAAAAAIAAAAAAAAAAQAAABsAAAEA"
    "AAAAAADwP2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9xMmcAAAAAAAAAAgAAAAEAAAABAACAGwAAAQAAAAAAAPg/"
    "aHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3EzaAAAAAAAAAACAAAAAAAAAAEAAAAbAAABAAAAAAAAAEBodHRwczov"
    "L3d3dy5leGFtcGxlLnRlc3QvcTSUSwV0lHUu"
)
FLEET_V1_CELL = (
    "gAWV7AgAAAAAAAB9lCiMBGhvc3SUjBB3d3cuZXhhbXBsZS50ZXN0lIwGY3Jhd2xzlH2UKIwBYZR9lChoAWgCjAZz"
    "Y2hlbWWUjAVodHRwc5SMBnJvYm90c5SMFHBpcGVsaW5lLmNvcmUucm9ib3RzlIwMUm9ib3RzUG9saWN5lJOUKIwF"
    "cnVsZXOUR0CPQAAAAAAAS8hOQzl4nAstTi3STUxPzSuxUtDicsksTszJyS+3UtAvKMosSyxJ1edyLkosz9FNSc1J"
    "rLRSMOYCAKFdEDKUQxCgKivd1+gTnF0Xo93c8l79lEsxdJRSlIwMbmV4dF9hbGxvd2VklEdAj5QAAAAAAIwPbGFz"
    "dF9yZXF1ZXN0X2F0lEdAj2gAAAAAAIwFbGVhc2WUjBhwaXBlbGluZS5jb3JlLnBvbGl0ZW5lc3OUjAVMZWFzZZST"
    "lCmBlF2UKIwHbGVhc2UtMZRoFYwJTGVhc2VLaW5klJOUjARwYWdllIWUUpSMGmh0dHBzOi8vd3d3LmV4YW1wbGUu"
    "dGVzdC9wlEdAj2gAAAAAAEdAkFQAAAAAAIwVcGlwZWxpbmUuY29yZS5yZWNvcmRzlIwNRnJvbnRpZXJFbnRyeZST"
    "lCmBlF2UKIwaaHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3CUSwdLAUsBSwBHQAAAAAAAAACIZWJLAIhHQD4AAAAA"
    "AABlYowMcGFnZXNfaXNzdWVklEsMjBRjb25zZWN1dGl2ZV9mYWlsdXJlc5RLA4wMcGFya2VkX3VudGlslEdAsfgA"
    "AAAAAIwOY2FsZW5kYXJfcGFnZXOUSwSMCmJ1c3lfc2luY2WUR0CPOAAAAAAAjA9yb2JvdHNfcmVkaXJlY3SUjCRo"
    "dHRwczovL3d3dy5leGFtcGxlLnRlc3Qvcm9ib3RzMi50eHSUjAtyb2JvdHNfaG9wc5RLAowHd2FrZV9hdJRHQJBU"
    "AAAAAACMDGxhc3RfZWxhcHNlZJRHP9AAAAAAAACMGWNyYXdsX2RlbGF5X2NhcHBlZF9sb2dnZWSUiIwPZHVwbGlj"
    "YXRlX2hlYXZ5lIiMB2Jsb2NrZWSUjBxibG9ja2VkIGFkZHJlc3MgKDEwLjAuMC4wLzgplIwNYmxvY2tlZF91bnRp"
    "bJRHQPVWgAAAAACMEG92ZXJmbG93X3dyaXR0ZW6USwWMDW92ZXJmbG93X3JlYWSUSwOMEG92ZXJmbG93X2RlbGV0"
    "ZWSUSwKMDW92ZXJmbG93X3VybHOUS5aMDWxhc3RfZW5kZWRfYXSUR0CPagAAAAAAjA5yb2JvdHNfYXdhaXRlZJSM"
    "GnBpcGVsaW5lLmNvcmUucm9ib3RzX3JlbGF5lIwNQXdhaXRlZFJvYm90c5STlCmBlF2UKIwIZXJyYW5kLTGUjB1o"
    "dHRwczovL290aGVyLnRlc3Qvcm9ib3RzLnR4dJSMCm90aGVyLnRlc3SUSwFHQJLAAAAAAABlYowLcm9ib3RzX2Rl"
    "c2uUaDyMClJvYm90c0Rlc2uUk5QpgZR9lCiMB3dhaXRpbmeUfZSMI2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9y"
    "b2JvdHMudHh0lF2UjAphc2tlci50ZXN0lIwIZXJyYW5kLTmUhpRhc4wHYW5zd2Vyc5R9lIwjaHR0cHM6Ly93d3cu"
    "ZXhhbXBsZS50ZXN0L3JvYm90cy50eHSUaDyMC1JvYm90c0ZldGNolJOUKYGUXZQojCNodHRwczovL3d3dy5leGFt"
    "cGxlLnRlc3Qvcm9ib3RzLnR4dJRoDCiMCWFsbG93X2FsbJRHQI9IAAAAAABNLQFOQwCUaFlLAHSUUpSMJGh0dHBz"
    "Oi8vd3d3LmV4YW1wbGUudGVzdC9yb2JvdHMyLnR4dJRlYnN1YowNc2l0ZW1hcHNfcmVhZJRHQI9AAAAAAACMBXF1"
    "ZXVllChLAEsASwBoWUsAQh8BAABkAAAAAAAAAAIAAAAAAAAAAQAAABsAAABodHRwczovL3d3dy5leGFtcGxlLnRl"
    "c3QvcTBlAAAAAAAAAAIAAAABAAAAAQAAABsAAAEAAAAAAADgP2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9xMWYA"
    "AAAAAAAAAgAAAAAAAAABAAAAGwAAAQAAAAAAAPA/aHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3EyZwAAAAAAAAAC"
    "AAAAAQAAAAEAAIAbAAABAAAAAAAA+D9odHRwczovL3d3dy5leGFtcGxlLnRlc3QvcTNoAAAAAAAAAAIAAAAAAAAA"
    "AQAAABsAAAEAAAAAAAAAQGh0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9xNJRLBXSUdYwBYpR9lChoAWgCaAeMBGh0"
    "dHCUaAlOaBJHAAAAAAAAAABoE05oFE5oJ0sAaChLAGgpTmgqSwBoK05oLE5oLksAaC9OaDBHAAAAAAAAAABoMYlo"
    "MoloM05oNUcAAAAAAAAAAGg2SwBoN0sAaDhLAGg5SwBoOk5oO05oRE5oXU5oXihLAEsASwBoWUsAaFlLAHSUdXWM"
    "BmhvbGRlcpRoBWgSR0CPlAAAAAAAjAhsYXN0X2VuZJRHQI9qAAAAAACMC2xhc3Rfc2VydmVklGgFaC9HQJBUAAAA"
    "AABoK0dAjzgAAAAAAIwKdG9tYnN0b25lc5R9lIwBY5RHQMGUAAAAAABzaAloDCiMCWFsbG93X2FsbJRHQIwgAAAA"
    "AABNlAFOaFloWUsAdJRSlIwLcm9ib3RzX2tlcHSUaEYpgZR9lChoSX2UaFB9lIwjaHR0cHM6Ly93d3cuZXhhbXBs"
    "ZS50ZXN0L3JvYm90cy50eHSUaFQpgZRdlCiMI2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9yb2JvdHMudHh0lGgM"
    "KIwFcnVsZXOUR0CNsAAAAAAAS8hOQx94nAstTi3STUxPzSuxUtDicszJyS+3UtDnAgBcxQb8lEMQmwV4uY/EmPmM"
    "7P0z42CIBZRLF3SUUpROZWJzdWKMDGFzbGVlcF9ub3RlZJR9lGgFR0CziAAAAAAAc3Uu"
)
HOST_V2_CELL = (
    "gAWVHAcAAAAAAAB9lCiMB3ZlcnNpb26USwKMBGhvc3SUjBB3d3cuZXhhbXBsZS50ZXN0lIwGc2NoZW1llIwFaHR0"
    "cHOUjAxuZXh0X2FsbG93ZWSUR0CPlAAAAAAAjA9sYXN0X3JlcXVlc3RfYXSUR0CPaAAAAAAAjAxsYXN0X2VsYXBz"
    "ZWSURz/QAAAAAAAAjA1sYXN0X2VuZGVkX2F0lEdAj2oAAAAAAIwHd2FrZV9hdJRHQJBUAAAAAACMCmJ1c3lfc2lu"
    "Y2WUR0CPOAAAAAAAjAVsZWFzZZR9lCiMCGxlYXNlX2lklIwHbGVhc2UtMZSMA3VybJSMGmh0dHBzOi8vd3d3LmV4"
    "YW1wbGUudGVzdC9wlIwKc3RhcnRlZF9hdJRHQI9oAAAAAACMCmV4cGlyZXNfYXSUR0CQVAAAAAAAjApyb2JvdHNf"
    "aG9wlEsAjANvd26UiIwHdGltZW91dJRHQD4AAAAAAACMBGtpbmSUjARwYWdllIwFZW50cnmUfZQoaBCMGmh0dHBz"
    "Oi8vd3d3LmV4YW1wbGUudGVzdC9wlIwIdXJsX2hhc2iUSweMBWRlcHRolEsBjAdhdHRlbXB0lEsBjA1yZWRpcmVj"
    "dF9ob3BzlEsAjAhwcmlvcml0eZRHQAAAAAAAAACMB3NpdGVtYXCUiHV1jAdiYWNrbG9nlH2UKIwQb3ZlcmZsb3df"
    "d3JpdHRlbpRLBYwNb3ZlcmZsb3dfcmVhZJRLA4wQb3ZlcmZsb3dfZGVsZXRlZJRLAowNb3ZlcmZsb3dfdXJsc5RL"
    "lowFcXVldWWUKEsASwBLAEMAlEsAQh8BAABkAAAAAAAAAAIAAAAAAAAAAQAAABsAAABodHRwczovL3d3dy5leGFt"
    "cGxlLnRlc3QvcTBlAAAAAAAAAAIAAAABAAAAAQAAABsAAAEAAAAAAADgP2h0dHBzOi8vd3d3LmV4YW1wbGUudGVz"
    "dC9xMWYAAAAAAAAAAgAAAAAAAAABAAAAGwAAAQAAAAAAAPA/aHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3EyZwAA"
    "AAAAAAACAAAAAQAAAAEAAIAbAAABAAAAAAAA+D9odHRwczovL3d3dy5leGFtcGxlLnRlc3QvcTNoAAAAAAAAAAIA"
    "AAAAAAAAAQAAABsAAAEAAAAAAAAAQGh0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9xNJRLBXSUdYwEZ2F0ZZR9lCiM"
    "CHJlZGlyZWN0lIwkaHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3JvYm90czIudHh0lIwEaG9wc5RLAowNc2l0ZW1h"
    "cHNfcmVhZJRHQI9AAAAAAACME2RlbGF5X2NhcHBlZF9sb2dnZWSUiIwFcnVsZXOUfZQojApmZXRjaGVkX2F0lEdA"
    "j0AAAAAAAIwGc3RhdHVzlEvIjAVlcnJvcpROjA9jb21wcmVzc2VkX2JvZHmUQzl4nAstTi3STUxPzSuxUtDicsks"
    "TszJyS+3UtAvKMosSyxJ1edyLkosz9FNSc1JrLRSMOYCAKFdEDKUjAtib2R5X2RpZ2VzdJRDEKAqK93X6BOcXRej"
    "3dzyXv2UjAlib2R5X3NpemWUSzFoF4wFcnVsZXOUdYwHYXdhaXRlZJR9lCiMCHF1ZXJ5X2lklIwIZXJyYW5kLTGU"
    "aBCMHWh0dHBzOi8vb3RoZXIudGVzdC9yb2JvdHMudHh0lGgCjApvdGhlci50ZXN0lIwDaG9wlEsBjAhkZWFkbGlu"
    "ZZRHQJLAAAAAAAB1jAVyZWxheZR9lCiMB3dhaXRpbmeUfZSMI2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9yb2Jv"
    "dHMudHh0lF2UjAphc2tlci50ZXN0lIwIZXJyYW5kLTmUhpRhc4wHYW5zd2Vyc5R9lIwjaHR0cHM6Ly93d3cuZXhh"
    "bXBsZS50ZXN0L3JvYm90cy50eHSUfZQoaBCMI2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9yb2JvdHMudHh0lIwI"
    "bG9jYXRpb26UjCRodHRwczovL3d3dy5leGFtcGxlLnRlc3Qvcm9ib3RzMi50eHSUjAZwb2xpY3mUfZQoaDVHQI9I"
    "AAAAAABoNk0tAWg3Tmg4aCloOmgpaDxLAGgXjAlhbGxvd19hbGyUdXVzdXWMB2JhY2tvZmaUfZQojBRjb25zZWN1"
    "dGl2ZV9mYWlsdXJlc5RLA4wMcGFya2VkX3VudGlslEdAsfgAAAAAAIwHYmxvY2tlZJSMHGJsb2NrZWQgYWRkcmVz"
    "cyAoMTAuMC4wLjAvOCmUjA1ibG9ja2VkX3VudGlslEdA9VaAAAAAAHWMBmxpbWl0c5R9lCiMDHBhZ2VzX2lzc3Vl"
    "ZJRLDIwOY2FsZW5kYXJfcGFnZXOUSwR1jAhzbG93ZG93bpR9lIwFaGVhdnmUiHN1Lg=="
)
FLEET_V2_CELL = (
    "gAWVgAkAAAAAAAB9lCiMB3ZlcnNpb26USwKMBGhvc3SUjBB3d3cuZXhhbXBsZS50ZXN0lIwGaG9sZGVylIwBYZSM"
    "DG5leHRfYWxsb3dlZJRHQI+UAAAAAACMCGxhc3RfZW5klEdAj2oAAAAAAIwLbGFzdF9zZXJ2ZWSUaAWMB3dha2Vf"
    "YXSUR0CQVAAAAAAAjApidXN5X3NpbmNllEdAjzgAAAAAAIwMYXNsZWVwX25vdGVklH2UaAVHQLOIAAAAAABzjAZj"
    "cmF3bHOUfZQoaAV9lChoAUsCaAJoA4wGc2NoZW1llIwFaHR0cHOUaAZHQI+UAAAAAACMD2xhc3RfcmVxdWVzdF9h"
    "dJRHQI9oAAAAAACMDGxhc3RfZWxhcHNlZJRHP9AAAAAAAACMDWxhc3RfZW5kZWRfYXSUR0CPagAAAAAAaAlHQJBU"
    "AAAAAABoCkdAjzgAAAAAAIwFbGVhc2WUfZQojAhsZWFzZV9pZJSMB2xlYXNlLTGUjAN1cmyUjBpodHRwczovL3d3"
    "dy5leGFtcGxlLnRlc3QvcJSMCnN0YXJ0ZWRfYXSUR0CPaAAAAAAAjApleHBpcmVzX2F0lEdAkFQAAAAAAIwKcm9i"
    "b3RzX2hvcJRLAIwDb3dulIiMB3RpbWVvdXSUR0A+AAAAAAAAjARraW5klIwEcGFnZZSMBWVudHJ5lH2UKGgZjBpo"
    "dHRwczovL3d3dy5leGFtcGxlLnRlc3QvcJSMCHVybF9oYXNolEsHjAVkZXB0aJRLAYwHYXR0ZW1wdJRLAYwNcmVk"
    "aXJlY3RfaG9wc5RLAIwIcHJpb3JpdHmUR0AAAAAAAAAAjAdzaXRlbWFwlIh1dYwHYmFja2xvZ5R9lCiMEG92ZXJm"
    "bG93X3dyaXR0ZW6USwWMDW92ZXJmbG93X3JlYWSUSwOMEG92ZXJmbG93X2RlbGV0ZWSUSwKMDW92ZXJmbG93X3Vy"
    "bHOUS5aMBXF1ZXVllChLAEsASwBDAJRLAEIfAQAAZAAAAAAAAAACAAAAAAAAAAEAAAAbAAAAaHR0cHM6Ly93d3cu"
    "ZXhhbXBsZS50ZXN0L3EwZQAAAAAAAAACAAAAAQAAAAEAAAAbAAABAAAAAAAA4D9odHRwczovL3d3dy5leGFtcGxl"
    "LnRlc3QvcTFmAAAAAAAAAAIAAAAAAAAAAQAAABsAAAEAAAAAAADwP2h0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9x"
    "MmcAAAAAAAAAAgAAAAEAAAABAACAGwAAAQAAAAAAAPg/aHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3EzaAAAAAAA"
    "AAACAAAAAAAAAAEAAAAbAAABAAAAAAAAAEBodHRwczovL3d3dy5leGFtcGxlLnRlc3QvcTSUSwV0lHWMBGdhdGWU"
    "fZQojAhyZWRpcmVjdJSMJGh0dHBzOi8vd3d3LmV4YW1wbGUudGVzdC9yb2JvdHMyLnR4dJSMBGhvcHOUSwKMDXNp"
    "dGVtYXBzX3JlYWSUR0CPQAAAAAAAjBNkZWxheV9jYXBwZWRfbG9nZ2VklIiMBXJ1bGVzlH2UKIwKZmV0Y2hlZF9h"
    "dJRHQI9AAAAAAACMBnN0YXR1c5RLyIwFZXJyb3KUTowPY29tcHJlc3NlZF9ib2R5lEM5eJwLLU4t0k1MT80rsVLQ"
    "4nLJLE7Myckvt1LQLyjKLEssSdXnci5KLM/RTUnNSay0UjDmAgChXRAylIwLYm9keV9kaWdlc3SUQxCgKivd1+gT"
    "nF0Xo93c8l79lIwJYm9keV9zaXpllEsxaCCMBXJ1bGVzlHWMB2F3YWl0ZWSUfZQojAhxdWVyeV9pZJSMCGVycmFu"
    "ZC0xlGgZjB1odHRwczovL290aGVyLnRlc3Qvcm9ib3RzLnR4dJRoAowKb3RoZXIudGVzdJSMA2hvcJRLAYwIZGVh"
    "ZGxpbmWUR0CSwAAAAAAAdYwFcmVsYXmUfZQojAd3YWl0aW5nlH2UjCNodHRwczovL3d3dy5leGFtcGxlLnRlc3Qv"
    "cm9ib3RzLnR4dJRdlIwKYXNrZXIudGVzdJSMCGVycmFuZC05lIaUYXOMB2Fuc3dlcnOUfZSMI2h0dHBzOi8vd3d3"
    "LmV4YW1wbGUudGVzdC9yb2JvdHMudHh0lH2UKGgZjCNodHRwczovL3d3dy5leGFtcGxlLnRlc3Qvcm9ib3RzLnR4"
    "dJSMCGxvY2F0aW9ulIwkaHR0cHM6Ly93d3cuZXhhbXBsZS50ZXN0L3JvYm90czIudHh0lIwGcG9saWN5lH2UKGg+"
    "R0CPSAAAAAAAaD9NLQFoQE5oQWgyaENoMmhFSwBoIIwJYWxsb3dfYWxslHV1c3V1jAdiYWNrb2ZmlH2UKIwUY29u"
    "c2VjdXRpdmVfZmFpbHVyZXOUSwOMDHBhcmtlZF91bnRpbJRHQLH4AAAAAACMB2Jsb2NrZWSUjBxibG9ja2VkIGFk"
    "ZHJlc3MgKDEwLjAuMC4wLzgplIwNYmxvY2tlZF91bnRpbJRHQPVWgAAAAAB1jAZsaW1pdHOUfZQojAxwYWdlc19p"
    "c3N1ZWSUSwyMDmNhbGVuZGFyX3BhZ2VzlEsEdYwIc2xvd2Rvd26UfZSMBWhlYXZ5lIhzdYwBYpR9lChoAUsCaAJo"
    "A2gQjARodHRwlGgGRwAAAAAAAAAAaBJOaBNHAAAAAAAAAABoFE5oCU5oCk5oFU5oK32UKGgtSwBoLksAaC9LAGgw"
    "SwBoMShLAEsASwBoMksAaDJLAHSUdWg1fZQoaDdOaDlLAGg6Tmg7iWg8TmhHTmhPTnVoYn2UKGhkSwBoZU5oZk5o"
    "aEcAAAAAAAAAAHVoaX2UKGhrSwBobEsAdWhtfZRob4lzdXWMCnRvbWJzdG9uZXOUfZSMAWOUR0DBlAAAAAAAc4wG"
    "cm9ib3RzlH2UKGg+R0CMIAAAAAAAaD9NlAFoQE5oQWgyaENoMmhFSwBoIIwJYWxsb3dfYWxslHWMC3JvYm90c19r"
    "ZXB0lH2UKGhRfZRoWH2UjCNodHRwczovL3d3dy5leGFtcGxlLnRlc3Qvcm9ib3RzLnR4dJR9lChoGYwjaHR0cHM6"
    "Ly93d3cuZXhhbXBsZS50ZXN0L3JvYm90cy50eHSUaF1OaF99lChoPkdAjbAAAAAAAGg/S8hoQE5oQUMfeJwLLU4t"
    "0k1MT80rsVLQ4nLMyckvt1LQ5wIAXMUG/JRoQ0MQmwV4uY/EmPmM7P0z42CIBZRoRUsXaCCMBXJ1bGVzlHV1c3V1"
    "Lg=="
)

SAMPLES = {1: (HOST_V1_CELL, FLEET_V1_CELL), 2: (HOST_V2_CELL, FLEET_V2_CELL)}


def cell_value(sample: tuple[str, ...]) -> Any:
    from apache_beam.coders import PickleCoder  # the cell's coder, as the scheduler's

    return PickleCoder().decode(base64.b64decode("".join(sample)))


def expected_state() -> HostState:
    """The crawl state in the samples, every field set."""
    robots_body = b"User-agent: *\nDisallow: /private/\nCrawl-delay: 3\n"
    relay = RobotsRelay(
        waiting={f"https://{H}/robots.txt": [("asker.test", "errand-9")]},
        answers={f"https://{H}/robots.txt": RobotsFetch(
            f"https://{H}/robots.txt", RobotsPolicy.from_response(301, b"", 1001.0),
            f"https://{H}/robots2.txt")})
    return HostState(
        host=H, scheme="https", seen=b"seen-bytes", next_allowed=1010.5,
        last_request_at=1005.0, last_elapsed=0.25, last_ended_at=1005.25, wake_at=1045.0,
        busy_since=999.0,
        lease=Lease("lease-1", LeaseKind.PAGE, f"https://{H}/p", 1005.0, 1045.0,
                    entry=FrontierEntry(f"https://{H}/p", 7, 1, attempt=1, priority=2.0,
                                        sitemap=True), timeout=30.0),
        backlog=HostBacklog(
            HostQueue(FrontierEntry(f"https://{H}/q{i}", 100 + i, 2, attempt=i % 2,
                                    redirect_hops=1, priority=0.5 * i, sitemap=i == 3)
                      for i in range(5)),
            overflow_written=5, overflow_read=3, overflow_deleted=2, overflow_urls=150),
        gate=RobotsGate(
            rules=RobotsPolicy.from_response(200, robots_body, 1000.0),
            redirect=f"https://{H}/robots2.txt", hops=2,
            awaited=AwaitedRobots("errand-1", "https://other.test/robots.txt", "other.test",
                                  1, 1200.0),
            relay=relay, sitemaps_read=1000.0, delay_capped_logged=True),
        backoff=HostBackoff(consecutive_failures=3, parked_until=4600.0,
                            blocked="blocked address (10.0.0.0/8)", blocked_until=87400.0),
        limits=HostLimits(pages_issued=12, calendar_pages=4),
        slowdown=DuplicateSlowdown(heavy=True))


def expected_fleet() -> FleetHostState:
    """The fleet host in the samples: crawl "a" as expected_state(), "b" new, "c" evicted."""
    return FleetHostState(
        host=H, crawls={"a": expected_state(), "b": HostState(host=H)}, holder="a",
        next_allowed=1010.5, last_end=1005.25, last_served="a", wake_at=1045.0,
        busy_since=999.0, tombstones={"c": Tombstone(9000.0, b"c-seen")},
        robots=RobotsPolicy.from_response(404, b"", 900.0),
        robots_kept=RobotsRelay(answers={f"https://{H}/robots.txt": RobotsFetch(
            f"https://{H}/robots.txt",
            RobotsPolicy.from_response(200, b"User-agent: *\nAllow: /\n", 950.0))}),
        asleep_noted={"a": 5000.0})


def test_a_sample_is_kept_for_every_version_the_coder_reads():
    assert sorted(SAMPLES) == sorted(coder.VERSIONS) and max(coder.VERSIONS) == coder.VERSION


@pytest.mark.parametrize("version", sorted(SAMPLES), ids=lambda v: f"version-{v}")
def test_every_stored_version_reads_back_as_the_state_it_was_stored_from(version):
    host_cell, fleet_cell = SAMPLES[version]
    fields = cell_value(host_cell)
    assert fields.get("version", 1) == version
    state = coder.decode_host(fields, lambda: None, b"seen-bytes")
    assert state == expected_state()
    assert [e.url[-2:] for e in state.backlog.queue] == ["q0", "q1", "q2", "q3", "q4"]
    seen = {"a": b"seen-bytes", "c": b"c-seen"}
    fleet = FleetHostState.restored(cell_value(fleet_cell), lambda crawl_id: None, seen)
    assert fleet == expected_fleet()
    # And what the next event stores is the current version, plain.
    stored, _ = fleet.stored()
    assert stored["version"] == coder.VERSION
    assert_plain(stored)


def test_a_version_this_release_does_not_know_is_refused_with_what_to_do():
    fields, _ = coder.encode_host(expected_state())
    fields["version"] = coder.VERSION + 1
    with pytest.raises(ValueError, match="drain it and relaunch"):
        coder.decode_host(fields, lambda: None, b"")
    with pytest.raises(ValueError, match="layout version 3"):
        FleetHostState.restored({**expected_fleet().stored()[0], "version": 3}, lambda c: None)


# ------------------------------------------------------------------- adding fields
RECORDS = {"entry": coder.ENTRY, "robots_policy": coder.ROBOTS_POLICY,
           "robots_fetch": coder.ROBOTS_FETCH, "awaited": coder.AWAITED, "relay": coder.RELAY,
           "lease": coder.LEASE, "backlog": coder.BACKLOG, "gate": coder.GATE,
           "backoff": coder.BACKOFF, "limits": coder.LIMITS, "slowdown": coder.SLOWDOWN,
           "host": coder.HOST}
# Fields stored otherwise than by their record: the queue (its meta, beside the backlog's
# fields), the seen-set (apart) and the parts (each by its own record).
NOT_IN_RECORD = {"backlog": {"queue"},
                 "host": {"seen", "backlog", "gate", "backoff", "limits", "slowdown"}}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_coder_names_every_field_of_what_it_stores(name):
    """A field added to a stored class fails here until the coder stores it by name."""
    record = RECORDS[name]
    names = {f.name for f in dataclasses.fields(record.cls)} - NOT_IN_RECORD.get(name, set())
    assert record.names == names


def test_the_fleet_coder_names_every_field_of_the_fleet_host():
    names = {f.name for f in dataclasses.fields(FleetHostState)}
    assert set(coder.FLEET_PLAIN) | {"crawls", "tombstones", "robots", "robots_kept"} == names


PART_FIELDS = [(part, name) for part in ("backlog", "gate", "backoff", "limits", "slowdown")
               for name in sorted(RECORDS[part].names)]
PART_FIELDS += [(None, name) for name in sorted(coder.HOST.names - {"host"})]


@pytest.mark.parametrize(("part", "name"), PART_FIELDS,
                         ids=[f"{part or 'host'}.{name}" for part, name in PART_FIELDS])
def test_a_state_stored_before_a_field_existed_reads_back_with_its_default(part, name):
    fields, _ = coder.encode_host(expected_state())
    fields = pickle.loads(pickle.dumps(fields))
    del (fields[part] if part else fields)[name]
    state = coder.decode_host(fields, lambda: None, b"")
    owner = getattr(state, part) if part else state
    default = next(f for f in dataclasses.fields(owner) if f.name == name)
    expected = (default.default_factory() if default.default_factory
                is not dataclasses.MISSING else default.default)
    assert getattr(owner, name) == expected
    # Everything else reads back as stored.
    whole = expected_state()
    setattr(getattr(whole, part) if part else whole, name, expected)
    whole.seen = b""
    assert state == whole


def test_a_field_added_to_a_part_reads_its_default_from_a_value_stored_without_it():
    @dataclasses.dataclass
    class LaterLimits(HostLimits):
        sitemaps_issued: int = 7  # as a later release might add

    later = coder._Record(LaterLimits, coder.LIMITS.plain + ("sitemaps_issued",))
    stored = coder.LIMITS.encode(HostLimits(pages_issued=3, calendar_pages=1))
    assert later.decode(stored) == LaterLimits(pages_issued=3, calendar_pages=1,
                                               sitemaps_issued=7)
    # And a release without the field reads what the later one stored.
    assert coder.LIMITS.decode(later.encode(LaterLimits(3, 1, 9))) == HostLimits(3, 1)


# ------------------------------------------------------------------- round trips
PLAIN = (str, int, float, bool, bytes, type(None))


def assert_plain(value: Any, path: str = "fields") -> None:
    """Only str, int, float, bool, bytes, None and tuples, lists and dicts of them: nothing
    the cell's coder would pickle as a class of the crawler."""
    if type(value) in PLAIN:
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            assert_plain(item, f"{path}[{i}]")
        return
    assert type(value) is dict, f"{path} is a {type(value).__name__}"
    for key, item in value.items():
        assert type(key) is str, f"{path} has a key of type {type(key).__name__}"
        assert_plain(item, f"{path}.{key}")


def link(path: str, host: str = H) -> tuple[str, int, None]:
    url = f"https://{host}/{path}"
    return url, url_hash(url), None


EVENTS = st.lists(st.one_of(
    st.tuples(st.just("offer"), st.integers(1, 12)),
    st.tuples(st.just("fire"), st.floats(0.0, 30.0)),
    st.tuples(st.just("finish"), st.sampled_from([200, 503, 404, 301, None, "blocked"])),
    st.tuples(st.just("ask"), st.integers(0, 3)),
    st.tuples(st.just("slow"), st.booleans()),
), max_size=25)


@settings(max_examples=60, deadline=None)
@given(EVENTS)
def test_any_state_reads_back_equal_from_plain_fields(events):
    state, now, n = HostState(host=H, scheme="https"), 0.0, 0
    spilled_total = 0
    for op, arg in events:
        if op == "offer":
            _, _, spilled = state.offer([link(f"p{n + i}") for i in range(arg)], 1, POLICY)
            n += arg
            if spilled:
                spilled_total += len(state.backlog.overflow(spilled, POLICY))
        elif op == "fire":
            now += arg
            state.next_action(now, POLICY)
        elif op == "finish" and state.lease is not None:
            redirect = "https://other.test/robots.txt" if arg == 301 else None
            report = (FetchReport(None, blocked="blocked address (10.0.0.0/8)")
                      if arg == "blocked" else
                      FetchReport(arg, error=None if arg else "timeout", location=redirect))
            state.complete(state.lease.lease_id, report, now, POLICY)
        elif op == "ask":
            query = RobotsQuery(H, f"https://{H}/robots{arg}.txt", "asker.test", f"e{arg}")
            state.ask_robots(query, now, POLICY)
        elif op == "slow":
            state.slowdown.signal(arg, POLICY, H)
        fields, queue = coder.encode_host(state)
        assert_plain(fields)
        data = queue.data if queue.data is not None else state.backlog.queue.to_bytes()
        back = coder.decode_host(pickle.loads(pickle.dumps(fields)), lambda d=data: d,
                                 state.seen)
        assert back == state
