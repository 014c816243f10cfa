"""The pages' HTML (Jinja2, every value escaped) in one place."""
# ruff: noqa: E501 - HTML markup reads better unwrapped

from __future__ import annotations

from typing import Any

import jinja2

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }} - rmq-cluster</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/static/app.css">
<script src="/static/app.js" defer></script>
</head><body>
<header><b>rmq-cluster</b>
{% if cluster %}<nav>
{% for slug, label in nav %}<a href="/c/{{ cid }}/{{ slug }}"{% if slug == page %} class="on"{% endif %}>{{ label }}</a>{% endfor %}
</nav>
<form class="pick" method="get" action="/pick"><select name="c" data-autosubmit>
{% for i, c in clusters %}<option value="{{ i }}"{% if i == cid %} selected{% endif %}>{{ c.name }} ({{ c.namesrv_addr }})</option>{% endfor %}
</select><noscript><button>go</button></noscript></form>{% endif %}
{% if account %}<form class="who" method="post" action="/logout"><input type="hidden" name="csrf" value="{{ csrf }}">
<span>{{ account.access_key }}{% if account.admin %} (admin){% else %} (read-only){% endif %}</span> <button>log out</button></form>{% endif %}
</header>
<main>
{% if flash %}<p class="flash" id="flash">{{ flash }}</p>{% endif %}
<h1>{{ title }}</h1>
{% block body %}{% endblock %}
</main></body></html>
"""

LOGIN = """{% extends "base" %}{% block body %}
<form method="post" action="/login" class="card" id="login">
<input type="hidden" name="csrf" value="{{ csrf }}">
<label>AccessKey <input name="accessKey" autocomplete="username" required></label>
<label>SecretKey <input name="secretKey" type="password" autocomplete="current-password" required></label>
<button id="login-btn">log in</button>
</form>
<p class="note">The account is checked against the cluster: an admin call signed with it must
succeed. Accounts without admin rights see the pages but cannot act.</p>
{% endblock %}"""

CLUSTER = """{% extends "base" %}{% block body %}
<div data-live="/c/{{ cid }}/live/cluster"></div>
<table id="brokers"><thead><tr><th>cluster</th><th>broker</th><th>id</th><th>address</th><th>role</th>
<th>version</th><th>disk used</th><th>TPS in</th><th>TPS out</th><th>CommitLog max</th><th>up</th></tr></thead><tbody>
{% for b in brokers %}<tr><td>{{ b.cluster }}</td><td>{{ b.broker_name }}</td><td>{{ b.broker_id }}</td><td>{{ b.addr }}</td>
<td>{{ b.role }}</td>{% if b.error %}<td colspan="6" class="err">{{ b.error }}</td>{% else %}<td>{{ b.version }}</td>
<td>{{ pct(b.disk_ratio) }}</td><td class="num" data-k="in:{{ b.key }}">{{ "%.1f"|format(b.put_tps) }}</td>
<td class="num" data-k="out:{{ b.key }}">{{ "%.1f"|format(b.get_tps) }}</td><td class="num" data-k="max:{{ b.key }}">{{ b.max_offset }}</td><td>{{ b.runtime }}</td>{% endif %}</tr>
{% endfor %}</tbody></table>
<h2>TPS in (all brokers)</h2><canvas id="chart-tps" class="chart" width="800" height="160" data-chart="tps"></canvas>
{% endblock %}"""

TOPICS = """{% extends "base" %}{% block body %}
<p><input id="filter" data-filter="#topics" placeholder="filter ({{ topics|length }} topics)">
<label><input type="checkbox" id="show-sys" data-toggle-sys> retry, DLQ and system topics</label></p>
{% if can_act %}<details class="card"><summary>create or update a topic</summary>
<form method="post" action="/c/{{ cid }}/topics/update" id="create-topic">
<input type="hidden" name="csrf" value="{{ csrf }}">
<label>topic <input name="topic" id="new-topic" required maxlength="127" pattern="[%\\|a-zA-Z0-9_\\-]+"></label>
<label>cluster <select name="cluster">{% for c in cluster_names %}<option>{{ c }}</option>{% endfor %}</select></label>
<label>read queues <input name="readQueueNums" type="number" min="1" max="1024" value="8"></label>
<label>write queues <input name="writeQueueNums" type="number" min="1" max="1024" value="8"></label>
<label>perm <select name="perm"><option value="6">RW</option><option value="4">R</option><option value="2">W</option></select></label>
<label><input type="checkbox" name="order" value="true"> orderly</label>
<button id="create-topic-btn">save</button></form></details>{% endif %}
<table id="topics" data-page-rows="{{ page_rows }}"><thead><tr><th>topic</th><th>kind</th></tr></thead><tbody>
{% set shown = namespace(n=0) %}{% for t, kind in topics %}{% set show = kind == "normal" and shown.n < page_rows %}{% if show %}{% set shown.n = shown.n + 1 %}{% endif %}<tr class="k-{{ kind }}"{% if not show %} hidden{% endif %}><td><a href="/c/{{ cid }}/topic/{{ t|urlencode }}">{{ t }}</a></td><td>{{ kind }}</td></tr>
{% endfor %}</tbody></table>
<p class="note" data-more-for="topics"></p>
{% endblock %}"""

TOPIC = """{% extends "base" %}{% block body %}
<h2>route</h2>
<table id="route"><thead><tr><th>broker</th><th>addresses</th><th>read queues</th><th>write queues</th><th>perm</th></tr></thead><tbody>
{% for q in route.queue_datas %}<tr><td>{{ q.broker_name }}</td><td>{{ addrs.get(q.broker_name, "") }}</td>
<td>{{ q.read_queue_nums }}</td><td>{{ q.write_queue_nums }}</td><td>{{ perm(q.perm) }}</td></tr>{% endfor %}
</tbody></table>
<h2>queues</h2>
{% if stats is string %}<p class="err">{{ stats }}</p>{% else %}
<table id="queues"><thead><tr><th>broker</th><th>queue</th><th>min offset</th><th>max offset</th><th>last stored</th><th></th></tr></thead><tbody>
{% for s in stats %}<tr><td>{{ s.queue.broker_name }}</td><td>{{ s.queue.queue_id }}</td><td class="num">{{ s.min_offset }}</td>
<td class="num">{{ s.max_offset }}</td><td>{{ when(s.last_update_timestamp) }}</td>
<td><a href="/c/{{ cid }}/messages?topic={{ topic|urlencode }}&broker={{ s.queue.broker_name|urlencode }}&queue={{ s.queue.queue_id }}&offset={{ [s.max_offset - 16, s.min_offset]|max }}">messages</a></td></tr>{% endfor %}
</tbody></table>{% endif %}
<h2>consumed by</h2>
<ul id="consumed-by">{% for g in groups %}<li><a href="/c/{{ cid }}/group/{{ g|urlencode }}">{{ g }}</a></li>{% else %}<li>no group</li>{% endfor %}</ul>
{% if can_act %}<form method="post" action="/c/{{ cid }}/topic/{{ topic|urlencode }}/delete" class="card" data-confirm="Delete topic {{ topic }}?">
<input type="hidden" name="csrf" value="{{ csrf }}">
<label>delete from cluster <select name="cluster">{% for c in cluster_names %}<option>{{ c }}</option>{% endfor %}</select></label>
<button class="danger" id="delete-topic-btn">delete topic</button></form>{% endif %}
{% endblock %}"""

GROUPS = """{% extends "base" %}{% block body %}
{% for e in errors %}<p class="err">{{ e }}</p>{% endfor %}
<p><input id="filter" data-filter="#groups" placeholder="filter ({{ groups|length }} groups)"></p>
<table id="groups" data-page-rows="{{ page_rows }}"><thead><tr><th>group</th><th>brokers</th><th>broadcast</th><th>retry queues</th><th>max retries</th></tr></thead><tbody>
{% for g in groups %}<tr{% if loop.index > page_rows %} hidden{% endif %}><td><a href="/c/{{ cid }}/group/{{ g.name|urlencode }}">{{ g.name }}</a></td><td>{{ g.brokers|join(", ") }}</td>
<td>{{ g.config.get("consumeBroadcastEnable", "") }}</td><td>{{ g.config.get("retryQueueNums", "") }}</td><td>{{ g.config.get("retryMaxTimes", "") }}</td></tr>
{% endfor %}</tbody></table>
<p class="note" data-more-for="groups"></p>
{% endblock %}"""

GROUP = """{% extends "base" %}{% block body %}
{% if d.error %}<p class="err">{{ d.error }}</p>{% endif %}
<p>consume type <b>{{ d.consume_type or "-" }}</b>, model <b>{{ d.message_model or "-" }}</b>, TPS <b>{{ "%.1f"|format(d.tps) }}</b>,
total lag <b id="total-lag" data-k="total">{{ d.total_lag }}</b></p>
<div data-live="/c/{{ cid }}/live/group/{{ d.group|urlencode }}"></div>
<canvas id="chart-lag" class="chart" width="800" height="160" data-chart="lag"></canvas>
<h2>lag per queue</h2>
<table id="lag"><thead><tr><th>topic</th><th>broker</th><th>queue</th><th>broker offset</th><th>consumer offset</th><th>lag</th><th>last consumed</th></tr></thead><tbody>
{% for q in d.queues %}{% set k = q.queue.topic ~ "/" ~ q.queue.broker_name ~ "/" ~ q.queue.queue_id %}<tr><td>{{ q.queue.topic }}</td><td>{{ q.queue.broker_name }}</td><td>{{ q.queue.queue_id }}</td>
<td class="num" data-k="b:{{ k }}">{{ q.broker_offset }}</td><td class="num" data-k="c:{{ k }}">{{ q.consumer_offset }}</td><td class="num" data-k="lag:{{ k }}">{{ q.diff }}</td><td>{{ when(q.last_timestamp) }}</td></tr>
{% endfor %}</tbody></table>
<h2>clients</h2>
<table id="clients"><thead><tr><th>client id</th><th>address</th><th>language</th><th>version</th></tr></thead><tbody>
{% for c in d.clients %}<tr><td>{{ c.get("clientId") }}</td><td>{{ c.get("clientAddr") }}</td><td>{{ c.get("language") }}</td><td>{{ c.get("version") }}</td></tr>
{% else %}<tr><td colspan="4">no client online</td></tr>{% endfor %}</tbody></table>
{% if can_act %}<form method="post" action="/c/{{ cid }}/group/{{ d.group|urlencode }}/reset" class="card" id="reset-offset" data-confirm="Reset the offsets of {{ d.group }}?">
<input type="hidden" name="csrf" value="{{ csrf }}">
<label>topic <select name="topic">{% for t in topics %}<option>{{ t }}</option>{% endfor %}</select></label>
<label>to <select name="to" id="reset-to"><option value="earliest">the first message</option><option value="latest">the end (skip everything)</option><option value="time">a time</option></select></label>
<label>time (UTC) <input type="datetime-local" name="time" step="1"></label>
<button id="reset-btn">reset offset</button></form>{% endif %}
{% endblock %}"""

MESSAGES = """{% extends "base" %}{% block body %}
<form method="get" class="card" id="query">
<label>topic <input name="topic" value="{{ q.topic }}" list="topic-names"></label>
<label>key <input name="key" value="{{ q.key }}"></label>
<label>message id <input name="id" value="{{ q.id }}"></label>
<label>broker <input name="broker" value="{{ q.broker }}"></label>
<label>queue <input name="queue" value="{{ q.queue }}" type="number" min="0" max="1023"></label>
<label>offset <input name="offset" value="{{ q.offset }}" type="number" min="0"></label>
<button id="query-btn">find</button></form>
{% if error %}<p class="err">{{ error }}</p>{% endif %}
{% if searched %}<table id="messages"><thead><tr><th>message id</th><th>topic</th><th>queue</th><th>offset</th><th>tags</th><th>keys</th><th>stored</th><th>size</th></tr></thead><tbody>
{% for m in messages %}<tr><td><a href="/c/{{ cid }}/message/{{ m.offset_msg_id }}">{{ m.msg_id }}</a></td><td>{{ m.topic }}</td><td>{{ m.queue.broker_name }}/{{ m.queue_id }}</td>
<td class="num">{{ m.queue_offset }}</td><td>{{ m.tags or "" }}</td><td>{{ m.keys or "" }}</td><td>{{ when(m.store_timestamp) }}</td><td class="num">{{ m.body|length }}</td></tr>
{% else %}<tr><td colspan="8">no message</td></tr>{% endfor %}</tbody></table>{% endif %}
{% endblock %}"""

MESSAGE = """{% extends "base" %}{% block body %}
<table id="meta" class="kv"><tbody>
<tr><th>message id</th><td>{{ m.msg_id }}</td></tr><tr><th>offset id</th><td>{{ m.offset_msg_id }}</td></tr>
<tr><th>topic</th><td><a href="/c/{{ cid }}/topic/{{ m.topic|urlencode }}">{{ m.topic }}</a></td></tr>
<tr><th>queue</th><td>{{ m.queue.broker_name }}/{{ m.queue_id }} offset {{ m.queue_offset }}</td></tr>
<tr><th>born</th><td>{{ when(m.born_timestamp) }} from {{ m.born_host[0] }}:{{ m.born_host[1] }}</td></tr>
<tr><th>stored</th><td>{{ when(m.store_timestamp) }} on {{ m.store_host[0] }}:{{ m.store_host[1] }}</td></tr>
<tr><th>reconsumed</th><td>{{ m.reconsume_times }}</td></tr>
{% for k, v in props %}<tr><th>{{ k }}</th><td>{{ v }}</td></tr>{% endfor %}
</tbody></table>
<h2>path</h2>
{% if trace is none %}<p class="note" id="trace-none">no trace topic {{ trace_topic }} in this cluster (clients write traces with enableMsgTrace; brokers make the topic with traceTopicEnable)</p>
{% elif trace is string %}<p class="err" id="trace-error">trace: {{ trace }}</p>
{% else %}<ol id="trace-path" class="path">
{% for v in trace.sent %}<li class="step" data-step="sent"><b>sent</b> by producer group <b>{{ v.group }}</b> from {{ v.client_host }} at {{ when(v.timestamp) }} to {{ v.store_host }}: <b class="{{ v.status }}">{{ v.status }}</b> in {{ v.cost_ms }} ms</li>
{% else %}<li class="step note" data-step="sent">no Pub record (the producer traced nothing)</li>{% endfor %}
<li class="step" data-step="stored"><b>stored</b> on <b>{{ stored_on or "?" }}</b> ({{ m.store_host[0] }}:{{ m.store_host[1] }}) at {{ when(m.store_timestamp) }}, queue {{ m.queue_id }} offset {{ m.queue_offset }}</li>
{% for v in trace.ended %}<li class="step" data-step="ended"><b>transaction ended</b> by <b>{{ v.group }}</b> at {{ when(v.timestamp) }}</li>{% endfor %}
{% for group, views in trace.consumed %}<li class="step" data-step="consumed" data-group="{{ group }}"><b>consumed</b> by group <b>{{ group }}</b>
<table class="consumptions"><thead><tr><th>at</th><th>client</th><th>cost</th><th>status</th><th>retry</th></tr></thead><tbody>
{% for v in views %}<tr><td>{{ when(v.timestamp) }}</td><td>{{ v.client_host }}</td><td class="num">{{ v.cost_ms }} ms</td><td class="{{ v.status }}">{{ v.status }}</td><td class="num">{{ v.retry_times if v.retry_times is not none else "-" }}</td></tr>{% endfor %}
</tbody></table></li>{% endfor %}
{% for v in trace.in_flight %}<li class="step note" data-step="consuming"><b>being consumed</b> by group <b>{{ v.group }}</b> since {{ when(v.timestamp) }} ({{ v.client_host }})</li>{% endfor %}
{% if not trace.consumed and not trace.in_flight %}<li class="step note" data-step="unconsumed">not consumed yet (no consumer trace record)</li>{% endif %}
</ol>{% endif %}
<h2>body ({{ m.body|length }} bytes)</h2>
<p class="views"><button type="button" data-view="text" class="on">text</button><button type="button" data-view="json">JSON</button><button type="button" data-view="hex">hex</button></p>
<pre id="body-text" data-body="text">{{ body.text }}</pre>
<pre id="body-json" data-body="json" hidden>{{ body.json }}</pre>
<pre id="body-hex" data-body="hex" hidden>{{ body.hex }}</pre>
{% if dlq and can_act %}<form method="post" action="/c/{{ cid }}/message/{{ m.offset_msg_id }}/resend" class="card" id="resend" data-confirm="Send this message again to {{ origin }}?">
<input type="hidden" name="csrf" value="{{ csrf }}">
<p>A dead letter of <b>{{ origin_group }}</b>: send it again to <b>{{ origin }}</b>.</p>
<button id="resend-btn">resend</button></form>{% endif %}
{% endblock %}"""

REPLICATION = """{% extends "base" %}{% block body %}
<div data-live="/c/{{ cid }}/live/replication"></div>
<h2>slave lag (bytes)</h2>
<canvas id="chart-replication" class="chart" width="800" height="200" data-chart="lag"></canvas>
{% if sync is string %}<p class="err">controller: {{ sync }}</p>{% elif sync %}<h2>controller: SyncStateSets</h2>
<table id="sync-state"><thead><tr><th>group</th><th>master</th><th>master epoch</th><th>SyncStateSet epoch</th><th>in sync</th><th>not in sync</th></tr></thead><tbody>
{% for name, i in sync.items() %}<tr><td>{{ name }}</td><td>{{ i.master_broker_id }} {{ i.master_address }}</td><td>{{ i.master_epoch }}</td><td>{{ i.sync_state_set_epoch }}</td>
<td>{% for r in i.in_sync %}{{ r.broker_id }}={{ r.address }}{% if not r.alive %} (down){% endif %} {% endfor %}</td><td>{% for r in i.not_in_sync %}{{ r.broker_id }}={{ r.address }}{% if not r.alive %} (down){% endif %} {% endfor %}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% for g in groups %}<h2>{{ g.broker_name }}</h2>
<p>master {% if g.master %}{{ g.master.addr }}, CommitLog max <span data-k="max:{{ g.master.key }}">{{ g.master.max_offset }}</span>{% else %}<span class="err">none registered</span>{% endif %}</p>
<table class="replicas"><thead><tr><th>replica</th><th>address</th><th>CommitLog max</th><th>lag (bytes)</th><th></th></tr></thead><tbody>
{% for r in g.replicas %}<tr><td>{{ r.broker_name }}/{{ r.broker_id }}</td><td>{{ r.addr }}</td><td class="num" data-k="off:{{ r.broker_name }}/{{ r.broker_id }}">{{ r.offset }}</td>
<td class="num" data-k="lag:{{ r.broker_name }}/{{ r.broker_id }}">{{ "-" if r.lag_bytes is none else r.lag_bytes }}</td><td class="err">{{ r.error or "" }}</td></tr>
{% else %}<tr><td colspan="5">no replica registered</td></tr>{% endfor %}</tbody></table>
{% if g.ha_slaves %}<p>the master's HA connections:</p><ul>{% for s in g.ha_slaves %}<li>{{ s.line }}</li>{% endfor %}</ul>{% endif %}
{% if g.dledger %}<table class="dledger"><thead><tr><th>member</th><th>address</th><th>role</th><th>term</th><th>leader</th><th>commit index</th></tr></thead><tbody>
{% for b in g.dledger %}<tr><td>{{ b.info.get("dLegerSelfId") }}</td><td>{{ b.addr }}</td><td>{{ b.info.get("dLegerRole") }}</td><td>{{ b.info.get("dLegerTerm") }}</td><td>{{ b.info.get("dLegerLeaderId") }}</td><td>{{ b.info.get("dLegerCommitIndex") }}</td></tr>{% endfor %}
</tbody></table>{% endif %}
{% endfor %}
{% endblock %}"""

CHAOS = """{% extends "base" %}{% block body %}
<p>Runs found in {{ dirs|join(", ") or "no directory" }} (newest first).</p>
<table id="runs"><thead><tr><th>run</th><th>profile</th><th>fault</th><th>verdict</th><th>sent</th><th>acked</th><th>lost</th><th>replica audit</th></tr></thead><tbody>
{% for r in runs %}<tr><td><a href="/chaos/{{ r.id }}?c={{ cid }}">{{ r.name }}</a></td><td>{{ r.profile }}</td><td>{{ r.fault }}</td><td>{{ r.verdict }}</td>
<td class="num">{{ r.sent }}</td><td class="num">{{ r.acked }}</td><td class="num">{{ r.lost }}</td><td>{{ r.audit }}</td></tr>
{% else %}<tr><td colspan="8">no run</td></tr>{% endfor %}</tbody></table>
{% endblock %}"""

CHAOS_RUN = """{% extends "base" %}{% block body %}
{% if svg %}<img id="timeline" src="/chaos/{{ run_id }}/timeline.svg" alt="timeline of the run" class="timeline">{% endif %}
<h2>replica audit</h2>
<pre id="audit">{{ audit }}</pre>
<h2>result</h2>
<pre id="result">{{ result }}</pre>
{% endblock %}"""

ACL = """{% extends "base" %}{% block body %}
{% for addr, cfg in configs %}<h2>{{ addr }}</h2>
{% if cfg is string %}<p class="err">{{ cfg }}</p>{% else %}
<p>global white list: {{ cfg.white|join(", ") or "-" }}</p>
<table class="accounts"><thead><tr><th>access key</th><th>admin</th><th>white address</th><th>default topic perm</th><th>default group perm</th><th>topics</th><th>groups</th></tr></thead><tbody>
{% for a in cfg.accounts %}<tr><td>{{ a.accessKey }}</td><td>{{ a.admin }}</td><td>{{ a.whiteRemoteAddress }}</td><td>{{ a.defaultTopicPerm }}</td><td>{{ a.defaultGroupPerm }}</td>
<td>{{ a.topicPerms|join(", ") }}</td><td>{{ a.groupPerms|join(", ") }}</td></tr>{% endfor %}</tbody></table>{% endif %}
{% endfor %}
{% endblock %}"""

ERROR = """{% extends "base" %}{% block body %}<p class="err" id="error">{{ message }}</p>{% endblock %}"""

_ENV = jinja2.Environment(
    loader=jinja2.DictLoader({
        "base": BASE, "login": LOGIN, "cluster": CLUSTER, "topics": TOPICS, "topic": TOPIC,
        "groups": GROUPS, "group": GROUP, "messages": MESSAGES, "message": MESSAGE,
        "replication": REPLICATION, "chaos": CHAOS, "chaos_run": CHAOS_RUN, "acl": ACL,
        "error": ERROR,
    }),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render(name: str, **context: Any) -> str:
    return _ENV.get_template(name).render(**context)
