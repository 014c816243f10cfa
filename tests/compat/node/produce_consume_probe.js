'use strict';
// A real third-party RocketMQ 4.x client end to end: an ali-ons Producer sends messages through
// our NameServer + Broker and an ali-ons push Consumer receives them. Prints one JSON line.
//
// Pointing ali-ons at open-source RocketMQ: `nameSrv` instead of Aliyun's ONS address lookup;
// `httpclient` is asserted present but unused then; no accessKey => requests are not signed.
const { Producer, Consumer, Message } = require('ali-ons');

const [ nsAddr, topic, countArg, group, retryBody ] = process.argv.slice(2);
const count = Number(countArg || 10);
const TIMEOUT_MS = 45000;

const quietLogger = {
  info(...args) { if (process.env.PROBE_DEBUG) process.stderr.write(`[ali-ons info] ${args.map(String).join(' ')}\n`); }, debug() {}, warn(...args) { process.stderr.write(`[ali-ons warn] ${args.map(String).join(' ')}\n`); },
  error(...args) { process.stderr.write(`[ali-ons error] ${args.map(String).join(' ')}\n`); },
};

async function main() {
  const common = {
    nameSrv: nsAddr,
    httpclient: {},
    logger: quietLogger,
    instanceName: `probe-${process.pid}`,
    heartbeatBrokerInterval: 2000,
    rebalanceInterval: 1000,
    pollNameServerInteval: 2000,
    persistConsumerOffsetInterval: 1000,
  };
  const out = { sent: [], received: [], errors: [] };
  const consumer = new Consumer(Object.assign({}, common, {
    consumerGroup: group || 'CID_PROBE',
    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
  }));
  consumer.on('error', err => out.errors.push(`consumer: ${err && err.message}`));

  let done;
  const allReceived = new Promise(resolve => { done = resolve; });
  // `retryBody` is refused once (ACTION_RETRY => CONSUMER_SEND_MSG_BACK) and must come back
  // through %RETRY%<group>
  let retried = false;
  const seen = new Set();
  consumer.subscribe(topic, 'TagA || TagB', async msg => {
    const body = msg.body.toString();
    out.received.push({ body, tags: msg.tags, msgId: msg.msgId, topic: msg.topic,
      queueId: msg.queueId, queueOffset: Number(msg.queueOffset),
      reconsumeTimes: msg.reconsumeTimes });
    if (body === retryBody && !retried) {
      retried = true;
      return Consumer.ACTION_RETRY;
    }
    seen.add(body);
    if (seen.size >= count) done();
  });
  await consumer.ready();

  const producer = new Producer(Object.assign({}, common, { producerGroup: 'PID_PROBE' }));
  producer.on('error', err => out.errors.push(`producer: ${err && err.message}`));
  await producer.ready();
  for (let i = 0; i < count; i++) {
    const msg = new Message(topic, i % 2 ? 'TagB' : 'TagA', `hello ${i}`);
    msg.keys = [ `key-${i}` ];
    const r = await producer.send(msg);
    out.sent.push({ status: r.sendStatus, msgId: r.msgId, queueId: r.messageQueue.queueId,
      queueOffset: Number(r.queueOffset) });
  }
  // a message with a tag the consumer does not subscribe to: filtered out
  await producer.send(new Message(topic, 'TagC', 'not for you'));

  const timer = setTimeout(() => done(), TIMEOUT_MS);
  await allReceived;
  clearTimeout(timer);
  await producer.close();
  await consumer.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(() => process.exit(0)).catch(err => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
