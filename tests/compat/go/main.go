// Scenarios for Apache's Go client (github.com/apache/rocketmq-client-go/v2, unmodified, pinned
// in go.mod) against rmq-cluster. One process runs the scenarios named on the command line and
// prints one JSON line per observation on stdout (what the client reported, what its consumers
// received); tests/compat/test_go_client.py asserts on them field by field. The client's own log
// goes to stderr. Exit status 1 when a scenario could not finish.
//
//	probe -namesrv 127.0.0.1:9876 -broker 127.0.0.1:10911 -prefix g1 [-ak AK -sk SK] SCENARIO...
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// waitFor bounds every wait for a condition (receipts, callbacks).
const waitFor = 30 * time.Second

type probe struct {
	namesrv  []string
	broker   string
	prefix   string
	creds    *primitive.Credentials
	scenario string
	out      *sync.Mutex
}

func (p *probe) emit(event string, fields map[string]any) {
	rec := map[string]any{"scenario": p.scenario, "event": event}
	for k, v := range fields {
		rec[k] = v
	}
	line, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	p.out.Lock()
	defer p.out.Unlock()
	fmt.Println(string(line))
}

func (p *probe) name(kind string) string { return p.prefix + "-" + kind + "-" + p.scenario }

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// userProps are the properties a scenario sets; the client and the broker add others.
func userProps(idx int) map[string]string {
	color := "blue"
	if idx%2 == 0 {
		color = "red"
	}
	return map[string]string{"idx": strconv.Itoa(idx), "color": color}
}

func body(idx int) []byte {
	if idx == 5 { // over the client's 4 KiB compression threshold: stored zlib-compressed
		return []byte("big-5-" + strings.Repeat("0123456789abcdef", 6*64))
	}
	return []byte(fmt.Sprintf("body-%d-\u00e9\u4e2d", idx))
}

func (p *probe) producerOpts(instance string) []producer.Option {
	opts := []producer.Option{
		producer.WithNameServer(p.namesrv),
		producer.WithGroupName(p.name("pg")),
		producer.WithInstanceName(p.name("p-" + instance)),
		producer.WithRetry(1),
		producer.WithSendMsgTimeout(5 * time.Second),
	}
	if p.creds != nil {
		opts = append(opts, producer.WithCredentials(*p.creds))
	}
	return opts
}

func (p *probe) consumerOpts(group, instance string) []consumer.Option {
	opts := []consumer.Option{
		consumer.WithNameServer(p.namesrv),
		consumer.WithGroupName(p.name(group)),
		consumer.WithInstance(p.name("c-" + instance)),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}
	if p.creds != nil {
		opts = append(opts, consumer.WithCredentials(*p.creds))
	}
	return opts
}

func (p *probe) newAdmin(creds *primitive.Credentials) (admin.Admin, error) {
	opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver(p.namesrv))}
	if creds != nil {
		opts = append(opts, admin.WithCredentials(*creds))
	}
	return admin.NewAdmin(opts...)
}

func (p *probe) createTopic(adm admin.Admin, topic string, queues int) error {
	return adm.CreateTopic(context.Background(), admin.WithTopicCreate(topic),
		admin.WithBrokerAddrCreate(p.broker), admin.WithReadQueueNums(queues),
		admin.WithWriteQueueNums(queues))
}

func (p *probe) withTopic(queues int) (string, error) {
	adm, err := p.newAdmin(p.creds)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topic := p.name("t")
	if err := p.createTopic(adm, topic, queues); err != nil {
		return "", fmt.Errorf("create topic %s: %w", topic, err)
	}
	return topic, nil
}

func newMessage(topic string, idx int, tag string) *primitive.Message {
	msg := primitive.NewMessage(topic, body(idx))
	msg.WithProperties(userProps(idx)) // (replaces the map: before tags and keys)
	msg.WithTag(tag)
	msg.WithKeys([]string{fmt.Sprintf("k%d", idx)})
	return msg
}

func sentFields(msg *primitive.Message, idx int, mode string, res *primitive.SendResult) map[string]any {
	f := map[string]any{
		"idx": idx, "mode": mode, "topic": msg.Topic, "tags": msg.GetTags(), "keys": msg.GetKeys(),
		"body_sha": sha(body(idx)), "body_len": len(body(idx)),
		"uniq_id": msg.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex),
	}
	if res != nil {
		f["status"] = int(res.Status)
		f["msg_id"] = res.MsgID
		f["offset_msg_id"] = res.OffsetMsgID
		f["queue_offset"] = res.QueueOffset
		if res.MessageQueue != nil {
			f["queue_id"] = res.MessageQueue.QueueId
			f["broker"] = res.MessageQueue.BrokerName
		}
	}
	return f
}

func recvFields(who string, m *primitive.MessageExt) map[string]any {
	props := map[string]string{}
	for k, v := range m.GetProperties() {
		props[k] = v
	}
	f := map[string]any{
		"who": who, "topic": m.Topic, "tags": m.GetTags(), "keys": m.GetKeys(),
		"body": string(m.Body), "body_sha": sha(m.Body), "body_len": len(m.Body),
		"uniq_id": m.MsgId, "offset_msg_id": m.OffsetMsgId, "props": props,
		"queue_offset": m.QueueOffset, "reconsume_times": m.ReconsumeTimes,
		"born_ts": m.BornTimestamp, "store_ts": m.StoreTimestamp, "sys_flag": m.SysFlag,
	}
	if m.Queue != nil {
		f["queue_id"] = m.Queue.QueueId
		f["broker"] = m.Queue.BrokerName
	}
	return f
}

// collector gathers the distinct unique ids a consumer saw and wakes waiters.
type collector struct {
	mu   sync.Mutex
	seen map[string]bool
	ch   chan struct{}
}

func newCollector() *collector {
	return &collector{seen: map[string]bool{}, ch: make(chan struct{}, 1)}
}

func (c *collector) add(id string) {
	c.mu.Lock()
	c.seen[id] = true
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func (c *collector) waitCount(n int, what string) error {
	deadline := time.After(waitFor)
	for c.count() < n {
		select {
		case <-c.ch:
		case <-deadline:
			return fmt.Errorf("%s: %d of %d messages within %s", what, c.count(), n, waitFor)
		}
	}
	return nil
}

// pushConsumer subscribes and emits a recv event per delivery.
func (p *probe) pushConsumer(topic, group, expr, who string) (rocketmq.PushConsumer, *collector, error) {
	c, err := rocketmq.NewPushConsumer(p.consumerOpts(group, who)...)
	if err != nil {
		return nil, nil, err
	}
	col := newCollector()
	sel := consumer.MessageSelector{Type: consumer.TAG, Expression: expr}
	err = c.Subscribe(topic, sel, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			p.emit("recv", recvFields(who, m))
			col.add(m.MsgId)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return nil, nil, err
	}
	if err := c.Start(); err != nil {
		return nil, nil, err
	}
	return c, col, nil
}

// sends: sync, async, batch and one-way sends (one body over the compression threshold), then a
// push consumer receives every one.
func (p *probe) sends() error {
	topic, err := p.withTopic(4)
	if err != nil {
		return err
	}
	prod, err := rocketmq.NewProducer(p.producerOpts("sends")...)
	if err != nil {
		return err
	}
	if err := prod.Start(); err != nil {
		return err
	}
	defer prod.Shutdown()
	ctx := context.Background()
	for idx := 0; idx < 8; idx++ {
		msg := newMessage(topic, idx, "TagS")
		res, err := prod.SendSync(ctx, msg)
		if err != nil {
			return fmt.Errorf("sync send %d: %w", idx, err)
		}
		p.emit("sent", sentFields(msg, idx, "sync", res))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for idx := 8; idx < 14; idx++ {
		msg := newMessage(topic, idx, "TagA")
		wg.Add(1)
		i := idx
		err := prod.SendAsync(ctx, func(_ context.Context, res *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				errs <- fmt.Errorf("async send %d: %w", i, err)
				return
			}
			p.emit("sent", sentFields(msg, i, "async", res))
		}, msg)
		if err != nil {
			wg.Done()
			return fmt.Errorf("async send %d: %w", idx, err)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitFor):
		return errors.New("async send callbacks did not all arrive")
	}
	close(errs)
	for err := range errs {
		return err
	}
	batch := []*primitive.Message{}
	for idx := 14; idx < 17; idx++ {
		batch = append(batch, newMessage(topic, idx, "TagB"))
	}
	res, err := prod.SendSync(ctx, batch...)
	if err != nil {
		return fmt.Errorf("batch send: %w", err)
	}
	for pos, msg := range batch {
		f := sentFields(msg, 14+pos, "batch", res)
		f["batch_pos"] = pos
		p.emit("sent", f)
	}
	one := newMessage(topic, 17, "TagO")
	if err := prod.SendOneWay(ctx, one); err != nil {
		return fmt.Errorf("one-way send: %w", err)
	}
	p.emit("sent", sentFields(one, 17, "oneway", nil))

	c, col, err := p.pushConsumer(topic, "cg", "*", "push")
	if err != nil {
		return err
	}
	defer c.Shutdown()
	return col.waitCount(18, "push consumer")
}

// tags: one group subscribes "TagA || TagC", another "*"; both receive what they asked for.
func (p *probe) tags() error {
	topic, err := p.withTopic(2)
	if err != nil {
		return err
	}
	prod, err := rocketmq.NewProducer(p.producerOpts("tags")...)
	if err != nil {
		return err
	}
	if err := prod.Start(); err != nil {
		return err
	}
	defer prod.Shutdown()
	names := []string{"TagA", "TagB", "TagC"}
	for idx := 0; idx < 12; idx++ {
		msg := newMessage(topic, idx, names[idx%3])
		res, err := prod.SendSync(context.Background(), msg)
		if err != nil {
			return fmt.Errorf("send %d: %w", idx, err)
		}
		p.emit("sent", sentFields(msg, idx, "sync", res))
	}
	tagged, tcol, err := p.pushConsumer(topic, "cg-tag", "TagA || TagC", "tag")
	if err != nil {
		return err
	}
	defer tagged.Shutdown()
	all, acol, err := p.pushConsumer(topic, "cg-all", "*", "all")
	if err != nil {
		return err
	}
	defer all.Shutdown()
	if err := acol.waitCount(12, "'*' consumer"); err != nil {
		return err
	}
	return tcol.waitCount(8, "tag consumer")
}

// pull: a lite (poll/ack) consumer gets everything; PullFrom reads one queue from offset 1.
func (p *probe) pull() error {
	topic, err := p.withTopic(2)
	if err != nil {
		return err
	}
	prod, err := rocketmq.NewProducer(p.producerOpts("pull")...)
	if err != nil {
		return err
	}
	if err := prod.Start(); err != nil {
		return err
	}
	defer prod.Shutdown()
	var first *primitive.MessageQueue
	for idx := 0; idx < 10; idx++ {
		msg := newMessage(topic, idx, "TagP")
		res, err := prod.SendSync(context.Background(), msg)
		if err != nil {
			return fmt.Errorf("send %d: %w", idx, err)
		}
		if first == nil {
			first = res.MessageQueue
		}
		p.emit("sent", sentFields(msg, idx, "sync", res))
	}
	lite, err := rocketmq.NewPullConsumer(p.consumerOpts("cg-lite", "lite")...)
	if err != nil {
		return err
	}
	if err := lite.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}); err != nil {
		return err
	}
	if err := lite.Start(); err != nil {
		return err
	}
	defer lite.Shutdown()
	col := newCollector()
	deadline := time.Now().Add(waitFor)
	for col.count() < 10 {
		if time.Now().After(deadline) {
			return fmt.Errorf("lite consumer: %d of 10 messages within %s", col.count(), waitFor)
		}
		cr, err := lite.Poll(context.Background(), time.Second)
		if consumer.IsNoNewMsgError(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		for _, m := range cr.GetMsgList() {
			p.emit("recv", recvFields("lite", m))
			col.add(m.MsgId)
		}
		lite.ACK(context.Background(), cr, consumer.ConsumeSuccess)
	}

	puller, err := rocketmq.NewPullConsumer(p.consumerOpts("cg-from", "from")...)
	if err != nil {
		return err
	}
	if err := puller.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}); err != nil {
		return err
	}
	if err := puller.Start(); err != nil {
		return err
	}
	defer puller.Shutdown()
	mq := &primitive.MessageQueue{Topic: first.Topic, BrokerName: first.BrokerName, QueueId: first.QueueId}
	res, err := puller.PullFrom(context.Background(), mq, 1, 32)
	if err != nil {
		return fmt.Errorf("pull from: %w", err)
	}
	p.emit("pulled", map[string]any{
		"queue_id": mq.QueueId, "status": int(res.Status), "next_begin_offset": res.NextBeginOffset,
		"min_offset": res.MinOffset, "max_offset": res.MaxOffset, "count": len(res.GetMessageExts()),
	})
	for _, m := range res.GetMessageExts() {
		p.emit("recv", recvFields("pull_from", m))
	}
	return nil
}

// admin: create a topic with 3 queues, see it listed and routed, send to it, delete it.
func (p *probe) admin() error {
	adm, err := p.newAdmin(p.creds)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx := context.Background()
	topic := p.name("t")
	if err := p.createTopic(adm, topic, 3); err != nil {
		return fmt.Errorf("create topic: %w", err)
	}
	p.emit("created", map[string]any{"topic": topic})
	list, err := adm.FetchAllTopicList(ctx)
	if err != nil {
		return fmt.Errorf("topic list: %w", err)
	}
	p.emit("listed", map[string]any{"has_topic": contains(list.TopicList, topic)})
	mqs, err := adm.FetchPublishMessageQueues(ctx, topic)
	if err != nil {
		return fmt.Errorf("publish queues: %w", err)
	}
	ids := []int{}
	for _, mq := range mqs {
		ids = append(ids, mq.QueueId)
	}
	sort.Ints(ids)
	p.emit("queues", map[string]any{"queue_ids": ids, "broker": mqs[0].BrokerName})
	prod, err := rocketmq.NewProducer(p.producerOpts("admin")...)
	if err != nil {
		return err
	}
	if err := prod.Start(); err != nil {
		return err
	}
	defer prod.Shutdown()
	for idx := 0; idx < 6; idx++ {
		msg := newMessage(topic, idx, "TagX")
		res, err := prod.SendSync(ctx, msg)
		if err != nil {
			return fmt.Errorf("send %d: %w", idx, err)
		}
		p.emit("sent", sentFields(msg, idx, "sync", res))
	}
	if err := adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(p.broker),
		admin.WithNameSrvAddr(p.namesrv)); err != nil {
		return fmt.Errorf("delete topic: %w", err)
	}
	list, err = adm.FetchAllTopicList(ctx)
	if err != nil {
		return fmt.Errorf("topic list: %w", err)
	}
	p.emit("deleted", map[string]any{"has_topic": contains(list.TopicList, topic)})
	return nil
}

// acl: the topic exists (created signed by the test, as an operator would); the signed producer
// and consumer work; a wrong secret stores nothing. The Go admin never signs CreateTopic (its
// ACL hook is registered only by a client's Start, which an admin never calls) and ignores the
// response code: whether that topic got routed is reported for the test to judge.
func (p *probe) acl() error {
	if p.creds == nil {
		return errors.New("acl needs -ak and -sk")
	}
	topic := p.name("t")
	prod, err := rocketmq.NewProducer(p.producerOpts("acl")...)
	if err != nil {
		return err
	}
	if err := prod.Start(); err != nil {
		return err
	}
	defer prod.Shutdown()
	msg := newMessage(topic, 0, "TagL")
	res, err := prod.SendSync(context.Background(), msg)
	if err != nil {
		return fmt.Errorf("signed send: %w", err)
	}
	p.emit("sent", sentFields(msg, 0, "sync", res))
	c, col, err := p.pushConsumer(topic, "cg", "*", "push")
	if err != nil {
		return err
	}
	defer c.Shutdown()
	if err := col.waitCount(1, "signed consumer"); err != nil {
		return err
	}

	bad := *p.creds
	bad.SecretKey += "x"
	opts := append(p.producerOpts("bad"), producer.WithCredentials(bad))
	badProd, err := rocketmq.NewProducer(opts...)
	if err != nil {
		return err
	}
	if err := badProd.Start(); err != nil {
		return err
	}
	defer badProd.Shutdown()
	badMsg := newMessage(topic, 1, "TagL")
	res, err = badProd.SendSync(context.Background(), badMsg)
	f := map[string]any{"who": "producer"}
	if err != nil {
		f["error"] = err.Error()
	} else {
		f["status"] = int(res.Status)
	}
	p.emit("bad_secret", f)

	adm, err := p.newAdmin(p.creds)
	if err != nil {
		return err
	}
	defer adm.Close()
	other := p.name("t-admin")
	f = map[string]any{"topic": other}
	if err := p.createTopic(adm, other, 1); err != nil {
		f["error"] = err.Error()
	}
	_, err = adm.FetchPublishMessageQueues(context.Background(), other)
	f["routed"] = err == nil
	p.emit("admin_create", f)
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func main() {
	namesrv := flag.String("namesrv", "", "name server address host:port")
	broker := flag.String("broker", "", "master broker address host:port (admin create/delete)")
	prefix := flag.String("prefix", "g", "prefix of topics and groups")
	ak := flag.String("ak", "", "ACL access key")
	sk := flag.String("sk", "", "ACL secret key")
	flag.Parse()
	rlog.SetLogLevel("warn")
	out := &sync.Mutex{}
	var creds *primitive.Credentials
	if *ak != "" {
		creds = &primitive.Credentials{AccessKey: *ak, SecretKey: *sk}
	}
	scenarios := map[string]func(*probe) error{
		"sends": (*probe).sends, "tags": (*probe).tags, "pull": (*probe).pull,
		"admin": (*probe).admin, "acl": (*probe).acl,
	}
	failed := false
	for _, name := range flag.Args() {
		p := &probe{namesrv: strings.Split(*namesrv, ";"), broker: *broker, prefix: *prefix,
			creds: creds, scenario: name, out: out}
		run, ok := scenarios[name]
		if !ok {
			p.emit("failed", map[string]any{"error": "unknown scenario"})
			failed = true
			continue
		}
		start := time.Now()
		if err := run(p); err != nil {
			p.emit("failed", map[string]any{"error": err.Error()})
			failed = true
			continue
		}
		p.emit("done", map[string]any{"ms": time.Since(start).Milliseconds()})
	}
	if failed {
		os.Exit(1)
	}
}
