"""narwhal.engines.client's coroutines against narwhal-sim: aprefill/adecode
end to end, a cancelled task cancelling its leg promptly (B19), the event
loop never blocked while legs wait, and 200 concurrent decodes on the one
adapter thread (no thread per leg).
"""

import asyncio
import os
import threading
import time
import unittest

from narwhal.engines.client import AsyncDecodeStream, EngineClient, EngineError
from sim import Sim

MODEL = "Qwen/Qwen3-0.6B"
CONCURRENT = 200


def completion(prompt="Tell me about narwhals", max_tokens=6):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}


def text_of(chunks):
    return "".join(c["choices"][0].get("text", "") for c in chunks if c.get("choices"))


def os_threads():
    return len(os.listdir("/proc/self/task"))


class LoopLag:
    """A task that ticks every 10 ms and records the worst lateness."""

    def __init__(self):
        self.worst = 0.0
        self._task = None

    async def _run(self):
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            self.worst = max(self.worst, time.monotonic() - before - 0.01)

    def __enter__(self):
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc):
        self._task.cancel()


class EngineAsyncioTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.producer = Sim.start("p0", "--role", "prefill", "--max-silence-s", "20")
        cls.consumer = Sim.start("d0", "--role", "decode", "--max-silence-s", "20",
                                 "--token-interval-ms", "20")

    @classmethod
    def tearDownClass(cls):
        cls.producer.stop()
        cls.consumer.stop()

    def setUp(self):
        for sim in (self.producer, self.consumer):
            sim.clear_faults()
            sim.clear_requests()
        self.prefill_client = EngineClient(self.producer.url)
        self.decode_client = EngineClient(self.consumer.url, first_token_timeout_s=30)

    def assert_cancelled_promptly(self, sim, phase, cancelled_at):
        records = sim.wait_for(lambda rs: any(r["phase"] == phase and r["end"] for r in rs))
        (record,) = [r for r in records if r["phase"] == phase]
        self.assertEqual(record["end"], "client_gone")
        self.assertLess(record["ended_at"] - cancelled_at, 0.5, "the upstream closed at once")

    def test_B6_SeedSnippetAsCoroutines(self):
        async def run():
            request = completion()
            result = await self.prefill_client.aprefill(request)
            stream = await self.decode_client.adecode(result, request)
            self.assertIsInstance(stream, AsyncDecodeStream)
            chunks = [chunk async for chunk in stream]
            result = await self.prefill_client.aprefill(request)
            whole = await self.decode_client.adecode(result, request, stream=False)
            return chunks, whole

        chunks, whole = asyncio.run(run())
        self.assertEqual(len(text_of(chunks).split()), 6)
        self.assertEqual(whole["choices"][0]["text"], text_of(chunks),
                         "the same prompt yields the same text")
        self.assertEqual(whole["usage"]["completion_tokens"], 6)

    def test_B12_FailureRaisesFromAnext(self):
        self.consumer.set_faults({"kind": "silent_before_first_token", "phase": "decode"})
        client = EngineClient(self.consumer.url, first_token_timeout_s=0.4)

        async def run():
            result = await self.prefill_client.aprefill(completion())
            with LoopLag() as lag:
                with self.assertRaises(EngineError) as caught:
                    async for _ in await client.adecode(result, completion()):
                        pass
            return caught.exception, lag.worst

        e, lag = asyncio.run(run())
        self.assertEqual(e.status, 504)
        self.assertTrue(e.detail.startswith("no first token within 0.4s"), e.detail)
        self.assertLess(lag, 0.2, "waiting never blocks the event loop")

    def test_B19_CancelledTaskCancelsDecode(self):
        self.consumer.set_faults({"kind": "stall_after_tokens", "phase": "decode", "tokens": 1})

        async def run():
            result = await self.prefill_client.aprefill(completion())
            got_first = asyncio.Event()

            async def consume():
                async for _ in await self.decode_client.adecode(result, completion()):
                    got_first.set()

            with LoopLag() as lag:
                task = asyncio.create_task(consume())
                await asyncio.wait_for(got_first.wait(), 5)
                await asyncio.sleep(0.2)  # the stream is stalled now
                task.cancel()
                cancelled_at = time.time()
                with self.assertRaises(asyncio.CancelledError):
                    await task
            return cancelled_at, lag.worst

        cancelled_at, lag = asyncio.run(run())
        self.assert_cancelled_promptly(self.consumer, "decode", cancelled_at)
        self.assertLess(lag, 0.2)

    def test_B19_CancelledTaskCancelsPrefill(self):
        self.producer.set_faults({"kind": "delay_headers", "phase": "prefill", "ms": 10000})

        async def run():
            task = asyncio.create_task(self.prefill_client.aprefill(completion()))
            await asyncio.sleep(0.3)
            task.cancel()
            cancelled_at = time.time()
            with self.assertRaises(asyncio.CancelledError):
                await task
            return cancelled_at

        cancelled_at = asyncio.run(run())
        self.assert_cancelled_promptly(self.producer, "prefill", cancelled_at)

    def test_B19_TimeoutAroundNonStreamingDecode(self):
        self.consumer.set_faults({"kind": "silent_before_first_token", "phase": "decode"})

        async def run():
            result = await self.prefill_client.aprefill(completion())
            with self.assertRaises(asyncio.TimeoutError):
                await asyncio.wait_for(
                    self.decode_client.adecode(result, completion(), stream=False), 0.3)
            return time.time()

        cancelled_at = asyncio.run(run())
        self.assert_cancelled_promptly(self.consumer, "decode", cancelled_at)

    def test_ConcurrentDecodesShareOneLoopThread(self):
        # Warm up: the adapter's loop thread exists from the first leg on.
        asyncio.run(self.prefill_client.aprefill(completion()))
        base_py, base_os = threading.active_count(), os_threads()
        samples = []
        mid_stream = {"now": 0, "peak": 0}  # streams past their first chunk, not yet ended

        async def one(i):
            request = completion(prompt=f"narwhal number {i}", max_tokens=16)
            result = await self.prefill_client.aprefill(request)
            stream = await self.decode_client.adecode(result, request)
            chunks = []
            async for chunk in stream:
                if not chunks:
                    mid_stream["now"] += 1
                    mid_stream["peak"] = max(mid_stream["peak"], mid_stream["now"])
                chunks.append(chunk)
            mid_stream["now"] -= 1
            return text_of(chunks)

        async def sample(done):
            while not done.is_set():
                samples.append((threading.active_count(), os_threads()))
                await asyncio.sleep(0.02)

        async def run():
            done = asyncio.Event()
            sampler = asyncio.create_task(sample(done))
            with LoopLag() as lag:
                started = time.monotonic()
                texts = await asyncio.gather(*(one(i) for i in range(CONCURRENT)))
                elapsed = time.monotonic() - started
            done.set()
            await sampler
            return texts, elapsed, lag.worst

        texts, elapsed, lag = asyncio.run(run())
        self.assertEqual(len(texts), CONCURRENT)
        self.assertTrue(all(len(t.split()) == 16 for t in texts))
        peak_py = max(s[0] for s in samples)
        peak_os = max(s[1] for s in samples)
        print(f"\n{CONCURRENT} concurrent decodes in {elapsed:.2f}s: Python threads "
              f"{base_py} -> peak {peak_py}, OS threads {base_os} -> peak {peak_os}, "
              f"worst loop lag {lag * 1000:.0f} ms, peak streams open {mid_stream['peak']}")
        self.assertEqual(peak_py, base_py, "no Python thread per leg")
        self.assertLessEqual(peak_os, base_os + 1, "no OS thread per leg")
        # Concurrent, not serial: one at a time would never have two streams
        # open at once (a count, not a duration: the machine's pace does not
        # decide it).
        self.assertGreaterEqual(mid_stream["peak"], 10)
        consumer_records = self.consumer.ended_requests()
        self.assertEqual(sum(r["end"] == "complete" for r in consumer_records), CONCURRENT)


if __name__ == "__main__":
    unittest.main()
