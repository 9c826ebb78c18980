"""narwhal.engines.client against real narwhal-sim engines: the seed's Python
API end to end (B1, B2, B4, B6), same-worker decode (B5), PrefillResult's
fields, repr and detached parameters(), non-streaming assembly and headers.

Each test checks both what the caller got and what the engines received
(GET /sim/requests, GET /sim/kv).
"""

import unittest

from narwhal.engines.client import EngineClient, EngineError
from narwhal.engines.connector import PrefillResult
from sim import Sim

MODEL = "Qwen/Qwen3-0.6B"
PROMPT = "Tell me about narwhals"


def completion(max_tokens=6, **extra):
    return {"model": MODEL, "prompt": PROMPT, "max_tokens": max_tokens, **extra}


def chat(max_tokens=6, **extra):
    return {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens, **extra}


def text_of(chunks):
    out = ""
    for chunk in chunks:
        for choice in chunk.get("choices", []):
            out += choice.get("text") or choice.get("delta", {}).get("content") or ""
    return out


class EngineClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.producer = Sim.start("p0", "--role", "prefill")
        cls.consumer = Sim.start("d0", "--role", "decode")
        cls.both = Sim.start("b0", "--role", "both")
        cls.guarded = Sim.start("g0", "--role", "both", "--api-key-env", "NARWHAL_PY_TEST_KEY",
                                env={"NARWHAL_PY_TEST_KEY": "s3cret"})

    @classmethod
    def tearDownClass(cls):
        for sim in (cls.producer, cls.consumer, cls.both, cls.guarded):
            sim.stop()

    def setUp(self):
        for sim in (self.producer, self.consumer, self.both):
            sim.clear_faults()
            sim.clear_requests()

    def test_B6_SeedSnippetEndToEnd(self):
        # The seed's snippet: prefill() on the producer, its result passed
        # unchanged to decode() on the consumer.
        producer = EngineClient(self.producer.url)
        consumer = EngineClient(self.consumer.url)
        request = completion()
        result = producer.prefill(request)
        self.assertIsInstance(result, PrefillResult)
        chunks = list(consumer.decode(result, request))
        self.assertEqual(len(text_of(chunks).split()), 6)
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "length")

        # B1: the producer got a non-streaming one-token completion with the
        # placeholder kv_transfer_params and the handoff's backend request id.
        (prefill,) = self.producer.requests()
        self.assertEqual(prefill["path"], "/v1/completions")
        self.assertEqual(prefill["headers"]["x-request-id"], result.backend_request_id)
        self.assertEqual(prefill["body"]["stream"], False)
        self.assertEqual(prefill["body"]["max_tokens"], 1)
        self.assertEqual(prefill["body"]["kv_transfer_params"]["do_remote_decode"], True)
        # B4: the consumer got the original request, streaming, with the
        # descriptor verbatim and a fresh backend request id.
        (decode,) = self.consumer.ended_requests()
        self.assertEqual(decode["phase"], "decode")
        self.assertEqual(decode["body"]["prompt"], PROMPT)
        self.assertEqual(decode["body"]["max_tokens"], 6)
        self.assertEqual(decode["body"]["stream"], True)
        self.assertEqual(decode["body"]["kv_transfer_params"], result.parameters())
        self.assertNotEqual(decode["headers"]["x-request-id"], result.backend_request_id)
        self.assertEqual(decode["end"], "complete")
        # The consumer pulled the blocks from the producer.
        consumed = [c for c in self.producer.kv()["consumed"]
                    if c["remote_request_id"] == result.parameters()["remote_request_id"]]
        self.assertEqual([c["consumer"]["engine_id"] for c in consumed], ["d0"])

    def test_B2_PrefillResultFields(self):
        result = EngineClient(self.producer.url + "/").prefill(chat(), endpoint="/v1/chat/completions")
        self.assertEqual(result.producer_url, self.producer.url)
        self.assertEqual(result.endpoint, "/v1/chat/completions")
        self.assertEqual(result.connector, "NixlConnector")
        self.assertTrue(result.backend_request_id)
        self.assertEqual(result.parameters()["remote_engine_id"], "p0")
        first_age = result.age
        self.assertGreaterEqual(first_age, 0.0)
        self.assertLess(first_age, 5.0)
        self.assertGreater(result.age, first_age, "age grows from the producer leg's start")
        with self.assertRaises(TypeError):
            PrefillResult()  # built only by prefill()
        with self.assertRaises(AttributeError):
            result.producer_url = "http://elsewhere:1"

    def test_B2_ReprShowsOperatorFieldsAndNoPrompt(self):
        secret_prompt = "the launch code is 0000 narwhal"
        result = EngineClient(self.producer.url).prefill(
            {"model": MODEL, "prompt": secret_prompt, "max_tokens": 4})
        text = repr(result)
        for field in (self.producer.url, "/v1/completions", result.backend_request_id,
                      "NixlConnector", "p0", "age="):
            self.assertIn(field, text)
        self.assertNotIn("launch", text)
        self.assertNotIn("0000", text)

    def test_B6_ParametersAreDetached(self):
        producer = EngineClient(self.producer.url)
        request = completion()
        result = producer.prefill(request)
        original = result.parameters()
        copy = result.parameters()
        self.assertIsNot(copy, original, "a new dict on every call")
        copy["remote_engine_id"] = "someone-else"
        copy["remote_block_ids"] = []
        copy["remote_host"] = "203.0.113.9"
        del copy["remote_port"]
        copy["remote_block_ids"].append(7)
        self.assertEqual(result.parameters(), original)
        list(EngineClient(self.consumer.url).decode(result, request))
        (decode,) = self.consumer.ended_requests()
        self.assertEqual(decode["body"]["kv_transfer_params"], original)
        self.assertEqual(decode["end"], "complete")

    def test_B5_SameWorkerDecodeRemovesTransferParams(self):
        request = chat(kv_transfer_params={"remote_engine_id": "client-value"})
        result = EngineClient(self.both.url).prefill(request, endpoint="/v1/chat/completions")
        # Another client object on the same URL (trailing slash and all) is
        # the same engine: a same-worker decode.
        chunks = list(EngineClient(self.both.url + "/").decode(result, request))
        self.assertEqual(len(text_of(chunks).split()), 6)
        prefill, decode = self.both.ended_requests()
        self.assertEqual(prefill["body"]["kv_transfer_params"]["do_remote_decode"], True)
        self.assertEqual(decode["phase"], "decode")
        self.assertNotIn("kv_transfer_params", decode["body"],
                         "removed entirely, the client's value included")
        self.assertEqual(decode["body"]["messages"], request["messages"])
        self.assertEqual(decode["end"], "complete")

    def test_B4_NonStreamingDecodeIsAssembled(self):
        request = completion(max_tokens=5)
        result = EngineClient(self.producer.url).prefill(request)
        response = EngineClient(self.consumer.url).decode(result, request, stream=False)
        self.assertEqual(response["object"], "text_completion")
        self.assertEqual(len(response["choices"][0]["text"].split()), 5)
        self.assertEqual(response["usage"]["completion_tokens"], 5)
        (decode,) = self.consumer.ended_requests()
        self.assertEqual(decode["body"]["stream"], True, "the upstream leg always streams")
        self.assertEqual(decode["body"]["stream_options"], {"include_usage": True})

    def test_B4_ChatStreamMatchesEverywhere(self):
        request = chat()
        result = EngineClient(self.producer.url).prefill(request, endpoint="/v1/chat/completions")
        streamed = text_of(EngineClient(self.consumer.url).decode(result, request))
        result = EngineClient(self.producer.url).prefill(request, endpoint="/v1/chat/completions")
        assembled = EngineClient(self.consumer.url).decode(result, request, stream=False)
        self.assertEqual(assembled["object"], "chat.completion")
        self.assertEqual(assembled["choices"][0]["message"]["content"], streamed)

    def test_B2_NoDescriptorIsPrefillFailure(self):
        self.producer.set_faults({"kind": "no_descriptor", "phase": "prefill"})
        with self.assertRaises(EngineError) as caught:
            EngineClient(self.producer.url).prefill(completion())
        e = caught.exception
        self.assertEqual((e.phase, e.status, e.reason), ("prefill", 502, "invalid_response"))
        self.assertTrue(e.detail.startswith("no handoff: "), e.detail)
        self.assertFalse(e.transient)
        self.assertEqual(e.breaker_class, "kv_handoff")

    def test_HeadersCarryTheBearerToken(self):
        with self.assertRaises(EngineError) as caught:
            EngineClient(self.guarded.url).prefill(completion())
        self.assertEqual(caught.exception.engine_status, 401)
        client = EngineClient(self.guarded.url, headers={"Authorization": "Bearer s3cret"})
        request = completion()
        result = client.prefill(request)
        self.assertEqual(len(text_of(client.decode(result, request)).split()), 6)
        for bad in ({"X-Request-Id": "mine"}, {"Host": "x"}, {"Authorization": "Basic abc"},
                    {"Authorization": "Bearer a\r\nX-Evil: 1"}, {"X-Custom": "1"}):
            with self.assertRaises(ValueError, msg=str(bad)):
                EngineClient(self.guarded.url, headers=bad)

    def test_ArgumentsAreChecked(self):
        with self.assertRaises(ValueError):
            EngineClient("https://127.0.0.1:1")
        with self.assertRaises(ValueError):
            EngineClient(self.producer.url, first_token_timeout_s=0)
        with self.assertRaises(ValueError):
            EngineClient(self.producer.url, decode_read_timeout_s=float("nan"))
        client = EngineClient(self.producer.url)
        with self.assertRaises(ValueError):
            client.prefill(completion(), endpoint="/v1/embeddings")
        with self.assertRaises(TypeError):
            client.prefill(["not", "a", "dict"])
        with self.assertRaises(ValueError):
            client.prefill(completion(temperature=float("nan")))
        self.assertEqual(self.producer.requests(), [])


if __name__ == "__main__":
    unittest.main()
