"""EngineError from narwhal.engines.client against narwhal-sim faults: the B3
descriptor rejections (raised before any decode request), B10 status mapping,
B11 stream termination, B12/B13 timeouts with the seed's detail texts, and a
KeyboardInterrupt cancelling a blocked leg (B19).
"""

import os
import signal
import threading
import time
import unittest

from narwhal.engines.client import EngineClient, EngineError
from sim import Sim

MODEL = "Qwen/Qwen3-0.6B"
FIRST_TOKEN_S = 0.5
READ_S = 0.5


def completion(max_tokens=6):
    return {"model": MODEL, "prompt": "Tell me about narwhals", "max_tokens": max_tokens}


class EngineFailuresTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.producer = Sim.start("p0", "--role", "prefill", "--max-silence-s", "20")
        cls.consumer = Sim.start("d0", "--role", "decode", "--max-silence-s", "20")

    @classmethod
    def tearDownClass(cls):
        cls.producer.stop()
        cls.consumer.stop()

    def setUp(self):
        for sim in (self.producer, self.consumer):
            sim.clear_faults()
            sim.clear_requests()
        self.prefill_client = EngineClient(self.producer.url)
        self.decode_client = EngineClient(self.consumer.url, first_token_timeout_s=FIRST_TOKEN_S,
                                          decode_read_timeout_s=READ_S)

    def handoff(self, request=None):
        return self.prefill_client.prefill(request or completion())

    def assert_failure(self, e, phase, status, detail_prefix, transient=None):
        self.assertEqual(e.phase, phase)
        self.assertEqual(e.status, status)
        self.assertTrue(e.detail.startswith(detail_prefix), e.detail)
        if transient is not None:
            self.assertEqual(e.transient, transient)

    # --- B3: descriptor validation, before any decode request ----------------------

    def assert_rejected(self, result, detail_part, client=None, **decode_args):
        with self.assertRaises(EngineError) as caught:
            # Raised by decode() itself: nothing to iterate, no request sent.
            (client or self.decode_client).decode(result, completion(), **decode_args)
        e = caught.exception
        self.assert_failure(e, "decode", 502, "invalid continuation: ", transient=False)
        self.assertIn(detail_part, e.detail)
        self.assertEqual(e.reason, "invalid_response")
        self.assertEqual(e.breaker_class, "kv_handoff")
        self.assertEqual(self.consumer.requests(), [], "the decode engine received nothing")

    def test_B3_MissingEngineIdentityRejected(self):
        self.producer.set_faults({"kind": "descriptor_without_engine_id", "phase": "prefill"})
        result = self.handoff()
        self.assertNotIn("remote_engine_id", result.parameters())
        self.assert_rejected(result, "remote_engine_id")

    def test_B3_MalformedBlockIdsRejected(self):
        self.producer.set_faults({"kind": "malformed_block_ids", "phase": "prefill"})
        self.assert_rejected(self.handoff(), "remote_block_ids")

    def test_B3_ConnectorMismatchRejected(self):
        other = EngineClient(self.consumer.url, connector="LMCacheConnectorV1")
        self.assert_rejected(self.handoff(), "connector", client=other)
        with self.assertRaises(EngineError):
            list(other.decode(self.handoff(), completion()))

    def test_B3_EndpointMismatchRejected(self):
        self.assert_rejected(self.handoff(), "endpoint", endpoint="/v1/chat/completions")

    def test_B3_RejectionAlsoStopsCoroutines(self):
        import asyncio

        async def run():
            with self.assertRaises(EngineError) as caught:
                await self.decode_client.adecode(self.handoff(), completion(),
                                                 endpoint="/v1/chat/completions")
            return caught.exception

        e = asyncio.run(run())
        self.assertTrue(e.detail.startswith("invalid continuation: "), e.detail)
        self.assertEqual(self.consumer.requests(), [])

    # --- B10: failure mapping -------------------------------------------------------

    def test_B10_EngineStatusIs502(self):
        self.producer.set_faults({"kind": "http_status", "phase": "prefill", "status": 503,
                                  "message": "queue is full"})
        with self.assertRaises(EngineError) as caught:
            self.handoff()
        self.assert_failure(caught.exception, "prefill", 502, "", transient=True)
        self.assertEqual(caught.exception.engine_status, 503)
        self.assertIn("queue is full", caught.exception.detail)

    def test_B10_EngineTimeoutStatusIs504(self):
        self.producer.set_faults({"kind": "http_status", "phase": "prefill", "status": 504})
        with self.assertRaises(EngineError) as caught:
            self.handoff()
        self.assertEqual(caught.exception.status, 504)

    def test_B10_PrefillTimeoutIs504(self):
        self.producer.set_faults({"kind": "delay_headers", "phase": "prefill", "ms": 3000})
        client = EngineClient(self.producer.url, prefill_timeout_s=0.3)
        start = time.monotonic()
        with self.assertRaises(EngineError) as caught:
            client.prefill(completion())
        self.assertLess(time.monotonic() - start, 2.0)
        self.assert_failure(caught.exception, "prefill", 504, "prefill timed out after 0.")

    def test_B10_UnreachableEngineIs502(self):
        self.producer.set_faults({"kind": "drop_connection", "phase": "prefill"})
        with self.assertRaises(EngineError) as caught:
            self.handoff()
        self.assertEqual(caught.exception.status, 502)
        self.assertTrue(caught.exception.transient)

    # --- B11: stream termination --------------------------------------------------

    def test_B11_CloseBeforeDoneFails(self):
        self.consumer.set_faults({"kind": "close_before_done", "phase": "decode", "tokens": 2})
        chunks = []
        with self.assertRaises(EngineError) as caught:
            for chunk in self.decode_client.decode(self.handoff(), completion()):
                chunks.append(chunk)
        self.assertEqual(len(chunks), 2, "the chunks before the failure arrive first")
        self.assert_failure(caught.exception, "decode", 502,
                            "stream ended before the [DONE] terminator", transient=True)

    def test_B11_DoneBeforeTokenFails(self):
        self.consumer.set_faults({"kind": "done_before_token", "phase": "decode"})
        with self.assertRaises(EngineError) as caught:
            self.decode_client.decode(self.handoff(), completion(), stream=False)
        self.assertEqual(caught.exception.detail,
                         "stream ended with [DONE] before any token arrived")
        self.assertEqual(caught.exception.status, 502)

    def test_B11_ErrorObjectKeepsItsStatus(self):
        self.consumer.set_faults({"kind": "error_in_stream", "phase": "decode", "after_tokens": 1,
                                  "code": 503, "message": "engine overloaded"})
        with self.assertRaises(EngineError) as caught:
            list(self.decode_client.decode(self.handoff(), completion()))
        self.assertEqual(caught.exception.status, 503)
        self.assertIn("engine overloaded", caught.exception.detail)

    # --- B12 / B13: timeouts -------------------------------------------------------

    def test_B12_SilentFirstTokenTimesOut(self):
        self.consumer.set_faults({"kind": "silent_before_first_token", "phase": "decode"})
        result = self.handoff()
        # Another Python thread runs while this one waits: the GIL is released.
        ticks = []
        stop = threading.Event()
        ticker = threading.Thread(target=lambda: [ticks.append(1) or time.sleep(0.01)
                                                  for _ in iter(stop.is_set, True)])
        ticker.start()
        start = time.monotonic()
        try:
            with self.assertRaises(EngineError) as caught:
                list(self.decode_client.decode(result, completion()))
        finally:
            stop.set()
            ticker.join()
        elapsed = time.monotonic() - start
        self.assertGreater(len(ticks), 10, "the blocked call released the GIL")
        self.assertGreaterEqual(elapsed, FIRST_TOKEN_S * 0.9)
        self.assertLess(elapsed, FIRST_TOKEN_S + 1.5)
        self.assert_failure(caught.exception, "decode", 504, "no first token within 0.5s",
                            transient=True)
        self.assertEqual(caught.exception.reason, "engine_timeout")

    def test_B12_MetadataDoesNotStopTheFirstTokenClock(self):
        self.consumer.set_faults({"kind": "metadata_then_silence", "phase": "decode",
                                  "chunks": 3})
        request = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 4}
        result = self.prefill_client.prefill(request, endpoint="/v1/chat/completions")
        with self.assertRaises(EngineError) as caught:
            list(self.decode_client.decode(result, request))
        self.assert_failure(caught.exception, "decode", 504, "no first token within 0.5s: ")
        self.assertIn("metadata frame", caught.exception.detail)

    def test_B13_SilenceBetweenTokensTimesOut(self):
        self.consumer.set_faults({"kind": "stall_after_tokens", "phase": "decode", "tokens": 2})
        chunks = []
        start = time.monotonic()
        with self.assertRaises(EngineError) as caught:
            for chunk in self.decode_client.decode(self.handoff(), completion()):
                chunks.append(chunk)
        self.assertLess(time.monotonic() - start, READ_S + 1.5)
        self.assertEqual(len(chunks), 2)
        self.assert_failure(caught.exception, "decode", 504, "engine went silent between tokens",
                            transient=True)

    def test_B13_SlowConsumerIsNotEngineSilence(self):
        # The caller reading slower than the read timeout back-pressures the
        # engine read; it is not engine silence.
        self.consumer.set_faults({"kind": "slow_tokens", "phase": "decode", "interval_ms": 10})
        stream = self.decode_client.decode(self.handoff(), completion(max_tokens=4))
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            time.sleep(READ_S * 1.5)
        self.assertEqual(len(chunks), 4)

    # --- B19: KeyboardInterrupt cancels the blocked leg ----------------------------

    def interrupt_after(self, seconds):
        timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        self.addCleanup(timer.cancel)

    def assert_cancelled_promptly(self, sim, phase, interrupted_at):
        records = sim.wait_for(lambda rs: any(r["phase"] == phase and r["end"] for r in rs))
        (record,) = [r for r in records if r["phase"] == phase]
        self.assertEqual(record["end"], "client_gone")
        self.assertLess(record["ended_at"] - interrupted_at, 0.5, "the upstream closed at once")

    def test_B19_KeyboardInterruptCancelsDecode(self):
        self.consumer.set_faults({"kind": "silent_before_first_token", "phase": "decode"})
        client = EngineClient(self.consumer.url, first_token_timeout_s=30)
        stream = client.decode(self.handoff(), completion())
        self.interrupt_after(0.3)
        start = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            next(stream)
        interrupted_at = time.time()
        self.assertLess(time.monotonic() - start, 1.5)
        self.assert_cancelled_promptly(self.consumer, "decode", interrupted_at)

    def test_B19_KeyboardInterruptCancelsPrefill(self):
        self.producer.set_faults({"kind": "delay_headers", "phase": "prefill", "ms": 10000})
        self.interrupt_after(0.3)
        start = time.monotonic()
        with self.assertRaises(KeyboardInterrupt):
            self.handoff()
        interrupted_at = time.time()
        self.assertLess(time.monotonic() - start, 1.5)
        self.assert_cancelled_promptly(self.producer, "prefill", interrupted_at)

    def test_B19_ClosingTheStreamCancelsTheLeg(self):
        self.consumer.set_faults({"kind": "slow_tokens", "phase": "decode", "interval_ms": 200})
        stream = self.decode_client.decode(self.handoff(), completion(max_tokens=50))
        next(stream)
        stream.close()
        closed_at = time.time()
        self.assert_cancelled_promptly(self.consumer, "decode", closed_at)


if __name__ == "__main__":
    unittest.main()
