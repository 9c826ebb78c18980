// The official openai SDK against a real narwhal-sim: completions and chat,
// streaming and not, with the deterministic text the simulator promises,
// and its errors surfacing as the SDK's error classes.
//
// Run: NARWHAL_SIM_BIN=/path/to/narwhal-sim node --test sim_openai.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const MODEL = 'Qwen/Qwen3-0.6B';

// The simulator's token model (engines/sim/text_gen.h): a text prompt's ids
// are its tokenizer's (one id per 4 bytes: FNV-1a of the chunk % 151643);
// generated token j is the id 151643 + w_j with text ' ' + VOCABULARY[w_j],
// where w_j = splitmix64(state) % 64 and the state absorbs, FNV-1a style, the
// 4 little-endian bytes of every prompt id and then of every generated id.
const VOCABULARY = [
  'the', 'river', 'stone', 'light', 'quiet', 'north', 'whale',
  'tide', 'harbor', 'signal', 'cold', 'bright', 'deep', 'current',
  'shore', 'wind', 'salt', 'drift', 'silver', 'moon', 'wave',
  'reef', 'ice', 'song', 'path', 'field', 'cloud', 'storm',
  'island', 'pod', 'blue', 'fjord', 'echo', 'slow', 'swift',
  'calm', 'open', 'far', 'near', 'under', 'over', 'and',
  'of', 'to', 'in', 'a', 'with', 'from', 'into',
  'across', 'beyond', 'distant', 'old', 'new', 'long', 'small',
  'great', 'clear', 'dark', 'warm', 'green', 'gray', 'white',
  'red',
];
const SIM_VOCABULARY = 151643;
const MASK64 = 0xffffffffffffffffn;
const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;

function fnv1aBytes(hash, bytes) {
  for (const byte of bytes) {
    hash ^= BigInt(byte);
    hash = (hash * FNV_PRIME) & MASK64;
  }
  return hash;
}

function simTokenize(text) {
  const bytes = new TextEncoder().encode(text);
  const ids = [];
  for (let at = 0; at < bytes.length; at += 4) {
    ids.push(Number(fnv1aBytes(FNV_OFFSET, bytes.subarray(at, at + 4)) % BigInt(SIM_VOCABULARY)));
  }
  return ids;
}

function absorb(state, id) {
  return fnv1aBytes(state, [id & 0xff, (id >>> 8) & 0xff, (id >>> 16) & 0xff, (id >>> 24) & 0xff]);
}

function splitmix64(x) {
  let z = (x + 0x9e3779b97f4a7c15n) & MASK64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK64;
  return z ^ (z >> 31n);
}

function generateIds(promptIds, count) {
  let state = FNV_OFFSET;
  for (const id of promptIds) state = absorb(state, id);
  const ids = [];
  for (let j = 0; j < count; j++) {
    const id = SIM_VOCABULARY + Number(splitmix64(state) % BigInt(VOCABULARY.length));
    ids.push(id);
    state = absorb(state, id);
  }
  return ids;
}

const tokensText = (ids) => ids.map((id) => ' ' + VOCABULARY[id - SIM_VOCABULARY]).join('');

function generate(prompt, count) {
  return tokensText(generateIds(simTokenize(prompt), count));
}

const promptTokens = (text) => Math.max(1, Math.ceil(new TextEncoder().encode(text).length / 4));

let sim;
let baseUrl;
let client;

// Starts narwhal-sim on a free port and resolves with the port from its
// ready line (bounded wait).
function startSim(bin) {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, ['--port', '0', '--engine-id', 'sdk0', '--exit-on-stdin-eof'],
      { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error('narwhal-sim printed no ready line within 10 s'));
    }, 10000);
    child.on('error', (err) => { clearTimeout(timer); reject(err); });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`narwhal-sim exited with ${code} before it was ready`));
    });
    child.stdout.on('data', (data) => {
      out += data;
      const match = /^narwhal-sim ready port=(\d+) engine_id=(\S+)\n/.exec(out);
      if (match) {
        clearTimeout(timer);
        child.removeAllListeners('exit');
        resolve({ child, port: Number(match[1]) });
      }
    });
  });
}

async function setFaults(faults) {
  const res = await fetch(`${baseUrl}/sim/faults`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ faults }),
  });
  assert.equal(res.status, 200, await res.text());
}

before(async () => {
  const bin = process.env.NARWHAL_SIM_BIN;
  assert.ok(bin, 'NARWHAL_SIM_BIN must name the narwhal-sim binary');
  sim = await startSim(bin);
  baseUrl = `http://127.0.0.1:${sim.port}`;
  client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
});

after(async () => {
  if (!sim) return;
  const exited = new Promise((resolve) => sim.child.on('exit', resolve));
  sim.child.kill('SIGTERM');
  const code = await exited;
  assert.equal(code, 0, 'narwhal-sim exits 0 on SIGTERM');
});

test('the generator port matches the pinned simulator output', () => {
  assert.deepEqual(simTokenize('hello'), [18210, 149946]);
  assert.deepEqual(generateIds(simTokenize('hello'), 4), [151688, 151693, 151657, 151662]);
  assert.equal(generate('hello', 4), ' a beyond shore moon');
});

test('completions, non-streaming', async () => {
  const prompt = 'The quick brown fox';
  const res = await client.completions.create({ model: MODEL, prompt, max_tokens: 7 });
  assert.equal(res.object, 'text_completion');
  assert.equal(res.choices[0].text, generate(prompt, 7));
  assert.equal(res.choices[0].finish_reason, 'length');
  assert.deepEqual(res.usage, {
    prompt_tokens: promptTokens(prompt),
    completion_tokens: 7,
    total_tokens: promptTokens(prompt) + 7,
    prompt_tokens_details: null,
  });
  assert.match(res.system_fingerprint, /^vllm-0\.29\.1-[0-9a-f]{8}$/);
});

test('completions, streaming equals non-streaming', async () => {
  const prompt = 'stream and compare';
  const full = await client.completions.create({ model: MODEL, prompt, max_tokens: 9 });
  const stream = await client.completions.create({
    model: MODEL, prompt, max_tokens: 9, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.text;
      chunks += 1;
      finish = choice.finish_reason ?? finish;
    }
  }
  assert.equal(chunks, 9, 'one token per event');
  assert.equal(text, full.choices[0].text);
  assert.equal(text, generate(prompt, 9));
  assert.equal(finish, 'length');
  assert.deepEqual(usage, {
    prompt_tokens: full.usage.prompt_tokens,
    completion_tokens: 9,
    total_tokens: full.usage.total_tokens,
  });
});

test('chat, non-streaming and streaming', async () => {
  const messages = [
    { role: 'system', content: 'Be brief. ' },
    { role: 'user', content: 'Capital of France?' },
  ];
  const prompt = 'Be brief. Capital of France?';
  const full = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 5 });
  assert.equal(full.object, 'chat.completion');
  assert.equal(full.choices[0].message.role, 'assistant');
  assert.equal(full.choices[0].message.content, generate(prompt, 5));
  assert.equal(full.usage.completion_tokens, 5);

  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_completion_tokens: 6, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const delta = chunk.choices[0]?.delta;
    if (delta?.role) role = delta.role;
    if (delta?.content) text += delta.content;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, generate(prompt, 6));
  assert.equal(usage.completion_tokens, 6);
  assert.equal(usage.prompt_tokens, promptTokens(prompt));
});

test('return_token_ids, and resuming a completion from its ids', async () => {
  const prompt = 'Resume me from the ids';
  const full = await client.completions.create({
    model: MODEL, prompt, max_tokens: 8, return_token_ids: true,
  });
  const promptIds = full.choices[0].prompt_token_ids;
  const ids = full.choices[0].token_ids;
  assert.deepEqual(promptIds, simTokenize(prompt));
  assert.deepEqual(ids, generateIds(promptIds, 8));
  assert.equal(full.choices[0].text, tokensText(ids));

  const plain = await client.completions.create({ model: MODEL, prompt, max_tokens: 2 });
  assert.equal(plain.choices[0].token_ids, undefined);
  assert.equal(plain.choices[0].prompt_token_ids, undefined);

  const rest = await client.completions.create({
    model: MODEL, prompt: [...promptIds, ...ids.slice(0, 3)], max_tokens: 5, stream: true,
    return_token_ids: true,
  });
  let text = '';
  const streamedIds = [];
  let first = null;
  for await (const chunk of rest) {
    first ??= chunk;
    text += chunk.choices[0].text;
    streamedIds.push(...chunk.choices[0].token_ids);
  }
  assert.deepEqual(first.choices[0].prompt_token_ids, [...promptIds, ...ids.slice(0, 3)]);
  assert.deepEqual(streamedIds, ids.slice(3));
  assert.equal(text, tokensText(ids.slice(3)));

  const chat = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: prompt }], max_tokens: 4,
    return_token_ids: true,
  });
  assert.deepEqual(chat.prompt_token_ids, simTokenize(prompt));
  assert.deepEqual(chat.choices[0].token_ids, ids.slice(0, 4));
});

test('unknown model surfaces as NotFoundError', async () => {
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
    (err) => {
      assert.ok(err instanceof OpenAI.NotFoundError, `got ${err?.constructor?.name}`);
      assert.equal(err.status, 404);
      assert.match(err.message, /The model `no-such-model` does not exist\./);
      return true;
    },
  );
});

test('validation failure surfaces as BadRequestError', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 2, min_tokens: 5,
    }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400,
  );
});

test('an in-stream error frame surfaces as APIError', async () => {
  await setFaults([{ kind: 'error_in_stream', after_tokens: 2, code: 500 }]);
  const stream = await client.completions.create({
    model: MODEL, prompt: 'doomed', max_tokens: 8, stream: true,
  });
  let text = '';
  await assert.rejects(
    (async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    })(),
    (err) => {
      assert.ok(err instanceof OpenAI.APIError, `got ${err?.constructor?.name}`);
      assert.match(err.message, /Internal server error/);
      return true;
    },
  );
  assert.equal(text, generate('doomed', 2));
});

test('an injected http_status surfaces with its status', async () => {
  await setFaults([{ kind: 'http_status', status: 503, message: 'engine busy' }]);
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 1 }),
    (err) => err instanceof OpenAI.InternalServerError && err.status === 503,
  );
});
