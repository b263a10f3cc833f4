'use strict';
// Drives ali-ons (a stock RocketMQ 4.x client in pure JavaScript) against a broker.
// Usage: node client.js <mode> <json options>; prints one JSON line per event on stdout.
//   produce  {nameSrv, topic, count, tag, prefix}         -> {"sent": {msgId, key, body}}
//   consume  {nameSrv, topic, group, expect, timeoutMs, failFirst}
//            -> {"received": {msgId, tags, keys, body, reconsumeTimes, topic, properties}} ...
//               then {"done": true, "count": n} once `expect` messages arrived (or timeout)
const { Producer, Consumer, Message } = require('ali-ons');

const [mode, raw] = process.argv.slice(2);
const opts = JSON.parse(raw || '{}');
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const quiet = { info() {}, warn() {}, debug() {}, error(...a) { process.stderr.write(a.join(' ') + '\n'); } };
// With accessKey/secretKey, ali-ons signs every request (RocketMQ's plain ACL).
const credentials = opts.accessKey ? { accessKey: opts.accessKey, secretKey: opts.secretKey } : {};
const base = { nameSrv: opts.nameSrv, httpclient: {}, logger: quiet, ...credentials };

async function produce() {
  const producer = new Producer({ ...base, producerGroup: opts.group || 'ons-test-producer' });
  await producer.ready();
  for (let i = 0; i < opts.count; i++) {
    const key = `${opts.prefix}-key-${i}`;
    const body = `${opts.prefix} body ${i}`;
    const msg = new Message(opts.topic, opts.tag || 'TagA', body);
    msg.keys = [key];
    const result = await producer.send(msg);
    if (result.sendStatus !== 'SEND_OK') throw new Error(`send ${i}: ${result.sendStatus}`);
    out({ sent: { msgId: result.msgId, key, body, queueId: result.messageQueue.queueId } });
  }
  await producer.close();
}

async function consume() {
  const consumer = new Consumer({
    ...base,
    consumerGroup: opts.group,
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    persistConsumerOffsetInterval: 1000,
  });
  consumer.on('error', err => process.stderr.write(`consumer error: ${err.message}\n`));
  let count = 0;
  const failed = new Set();
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  consumer.subscribe(opts.topic, '*', async msg => {
    const body = msg.body.toString();
    if (opts.failFirst && body.includes(opts.failFirst) && !failed.has(body)) {
      failed.add(body);
      out({ failed: { body, msgId: msg.msgId, properties: msg.properties } });
      throw new Error(`handler fails once for ${body}`);
    }
    out({ received: { msgId: msg.msgId, tags: msg.tags, keys: msg.keys, body,
      reconsumeTimes: msg.reconsumeTimes, topic: msg.topic, properties: msg.properties } });
    count += 1;
    if (count >= opts.expect) finish();
  });
  await consumer.ready();
  const timer = setTimeout(finish, opts.timeoutMs || 30000);
  await finished;
  clearTimeout(timer);
  if (opts.settleMs) await new Promise(r => setTimeout(r, opts.settleMs));
  await consumer.close();
  out({ done: true, count });
}

(mode === 'produce' ? produce() : consume())
  .then(() => process.exit(0))
  .catch(err => { process.stderr.write(`${err.stack || err}\n`); process.exit(1); });
