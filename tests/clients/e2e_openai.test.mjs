// The official openai SDK against narwhal-serve's HTTP shim.
//
// Starts narwhal-serve (NARWHAL_SERVE_BIN, set by CTest) without --config,
// so it serves its embedded simulated fleet, on loopback port 0, and reads
// the listeners from its ready line. Run: node --test e2e_openai.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import OpenAI from 'openai';

const MODEL = 'Qwen/Qwen3-0.6B';
const READY_TIMEOUT_MS = 30000;

let serve;
let stderr = '';
let client;
let baseURL;

// Parses "narwhal-serve ready http=H:P grpc=H:P ..." by key.
function parseReady(line) {
  const fields = {};
  for (const part of line.trim().split(/\s+/).slice(2)) {
    const eq = part.indexOf('=');
    if (eq > 0) fields[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return fields;
}

before(async () => {
  const bin = process.env.NARWHAL_SERVE_BIN;
  assert.ok(bin, 'NARWHAL_SERVE_BIN must name the narwhal-serve binary');
  serve = spawn(bin, ['--http', '127.0.0.1:0', '--grpc', '127.0.0.1:0', '--admin', '127.0.0.1:0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  serve.stderr.on('data', (d) => { stderr += d; });
  // A test process that dies must not leave the router behind.
  process.on('exit', () => { if (serve.exitCode === null) serve.kill('SIGKILL'); });
  const fields = await new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`narwhal-serve printed no ready line within ${READY_TIMEOUT_MS} ms\n${stderr}`)),
      READY_TIMEOUT_MS);
    serve.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`narwhal-serve exited (${code ?? signal}) before it was ready\n${stderr}`));
    });
    createInterface({ input: serve.stdout }).on('line', (line) => {
      if (line.startsWith('narwhal-serve ready ')) {
        clearTimeout(timer);
        resolve(parseReady(line));
      }
    });
  });
  assert.ok(fields.http, `ready line without http=: ${JSON.stringify(fields)}`);
  baseURL = `http://${fields.http}/v1`;
  client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
});

after(async () => {
  if (!serve || serve.exitCode !== null) return;
  const exited = new Promise((resolve) => serve.once('exit', (code, signal) => resolve({ code, signal })));
  serve.kill('SIGTERM');
  const killer = setTimeout(() => serve.kill('SIGKILL'), 15000);
  const { code } = await exited;
  clearTimeout(killer);
  assert.equal(code, 0, `narwhal-serve did not exit 0 on SIGTERM\n${stderr}`);
});

async function collectCompletion(params) {
  const stream = await client.completions.create({ ...params, stream: true });
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    chunks += 1;
  }
  return { text, chunks };
}

test('completions: streaming text equals the non-streaming text', async () => {
  const params = { model: MODEL, prompt: 'Tell me about narwhals', max_tokens: 12 };
  const plain = await client.completions.create(params);
  assert.equal(plain.object, 'text_completion');
  assert.equal(plain.choices.length, 1);
  const expected = plain.choices[0].text;
  assert.ok(expected.length > 0, 'empty completion');
  assert.equal(plain.usage?.completion_tokens, 12);

  const { text, chunks } = await collectCompletion(params);
  assert.equal(text, expected);
  assert.ok(chunks >= 12, `expected one event per token, got ${chunks}`);
});

test('chat: streaming content equals the non-streaming content', async () => {
  const params = {
    model: MODEL,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Where do narwhals live?' }],
    max_tokens: 10,
  };
  const plain = await client.chat.completions.create(params);
  assert.equal(plain.object, 'chat.completion');
  const expected = plain.choices[0].message.content;
  assert.equal(plain.choices[0].message.role, 'assistant');
  assert.ok(expected && expected.length > 0, 'empty chat completion');

  const stream = await client.chat.completions.create({ ...params, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, expected);
  assert.equal(finish, plain.choices[0].finish_reason);
});

test('an abort mid-stream ends the stream and the server keeps serving', async () => {
  const stream = await client.completions.create({
    model: MODEL, prompt: 'A long story about narwhals', max_tokens: 400, stream: true,
  });
  let received = 0;
  let error = null;
  try {
    for await (const chunk of stream) {
      if ((chunk.choices[0]?.text ?? '') !== '') received += 1;
      if (received === 3) stream.controller.abort();
    }
  } catch (err) {
    error = err;
  }
  assert.ok(error === null || error instanceof OpenAI.APIUserAbortError, `unexpected error: ${error}`);
  // Chunks the SDK had already read may still be yielded; the stream ends
  // far short of its 400 tokens.
  assert.ok(received >= 3 && received < 50, `the stream did not end at the abort: ${received} chunks`);
  assert.ok(stream.controller.signal.aborted);

  // The router noticed: the request ends cancelled and nothing stays in flight.
  const metricsURL = baseURL.replace(/\/v1$/, '/metrics');
  const sample = (text, re) => [...text.matchAll(re)].reduce((sum, m) => sum + Number(m[1]), 0);
  const deadline = Date.now() + 10000;
  for (;;) {
    const text = await (await fetch(metricsURL)).text();
    const cancelled = sample(text, /^narwhal_requests_total\{[^}]*terminal="cancelled"[^}]*\} (\S+)$/gm);
    const inflight = sample(text, /^narwhal_inflight (\S+)$/gm);
    if (cancelled === 1 && inflight === 0) break;
    assert.ok(Date.now() < deadline, `no cancelled request on /metrics within 10 s:\n${text}`);
    await new Promise((r) => setTimeout(r, 50));
  }

  // Still serving, streaming and not.
  const after = await client.completions.create({ model: MODEL, prompt: 'after the abort', max_tokens: 4 });
  assert.ok(after.choices[0].text.length > 0);
  const { text } = await collectCompletion({ model: MODEL, prompt: 'after the abort', max_tokens: 4 });
  assert.equal(text, after.choices[0].text);
});

test('a wrong model is an APIError with status 404', async () => {
  for (const stream of [false, true]) {
    await assert.rejects(
      client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2, stream }),
      (err) => {
        assert.ok(err instanceof OpenAI.APIError, `not an APIError: ${err}`);
        assert.ok(err instanceof OpenAI.NotFoundError, `not a NotFoundError: ${err}`);
        assert.equal(err.status, 404);
        assert.equal(err.type, 'invalid_request_error');
        assert.match(err.message, /no-such-model/);
        assert.ok(err.headers?.get('x-request-id'), 'no x-request-id on the error response');
        return true;
      },
    );
  }
});

test('models lists the served model', async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  assert.deepEqual(ids, [MODEL]);
});
