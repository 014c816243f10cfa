'use strict';
// Drives our RemotingServer with ali-ons' own remoting layer (Channel + RemotingCommand):
// a third-party RocketMQ 4.x implementation (unsorted JSON keys, numbers in extFields,
// header length read unmasked). Prints one JSON line with what it saw.
const Channel = require('ali-ons/lib/channel');
const RemotingCommand = require('ali-ons/lib/protocol/command/remoting_command');

const [ port, echoCode, failCode ] = process.argv.slice(2).map(Number);

async function main() {
  const channel = new Channel(`127.0.0.1:${port}`);
  await channel.ready();
  const out = {};

  const req = RemotingCommand.createRequestCommand(echoCode, { topic: 'TopicTest', queueId: 3, batch: false });
  req.body = Buffer.from('hello from ali-ons');
  const res = await channel.invoke(req, 5000);
  out.echo = { code: res.code, flag: res.flag, opaque: res.opaque, sentOpaque: req.opaque,
    language: res.language, version: res.version, extFields: res.extFields,
    body: res.body ? res.body.toString() : null };

  const unknown = await channel.invoke(RemotingCommand.createRequestCommand(9999, {}), 5000);
  out.unknown = { code: unknown.code, remark: unknown.remark };

  const failed = await channel.invoke(RemotingCommand.createRequestCommand(failCode, {}), 5000);
  out.failed = { code: failed.code, remark: failed.remark };

  const many = await Promise.all(Array.from({ length: 200 }, (_, i) => {
    const r = RemotingCommand.createRequestCommand(echoCode, { i });
    r.body = Buffer.from(`m${i}`);
    return channel.invoke(r, 10000);
  }));
  out.concurrent_ok = many.every((r, i) => r.extFields.i === String(i) && r.body.toString() === `m${i}`);

  channel.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch(err => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
