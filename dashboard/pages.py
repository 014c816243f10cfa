"""One handler per page and action: ask the cluster (``gather``), render (``templates``)."""

from __future__ import annotations

import functools
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..client.admin import DLQ_GROUP_TOPIC_PREFIX, Admin
from ..client.errors import MQClientError
from ..client.model import Message
from ..client.producer import Producer
from ..cluster.protocol.message import MessageConst
from ..cluster.protocol.names import validate_group, validate_topic
from ..cluster.protocol.trace import DEFAULT_TRACE_TOPIC
from . import chaos_runs, gather
from .forms import (
    SYSTEM_PROPERTIES,
    FormError,
    body_views,
    int_field,
    pct,
    perm_text,
    reset_timestamp,
    when,
)
from .sessions import Session
from .settings import (
    MAX_BODY_SHOWN,
    MAX_HEX_SHOWN,
    MAX_MESSAGES_LISTED,
    RESEND_GROUP,
    TABLE_PAGE_ROWS,
)
from .state import Dashboard, Forbidden, with_cookie
from .templates import render

NAV = (("cluster", "Cluster"), ("topics", "Topics"), ("groups", "Consumer groups"),
       ("messages", "Messages"), ("replication", "Replication"), ("chaos", "Chaos runs"),
       ("acl", "ACL"))


def _cid(request: Request) -> int:
    """The cluster's index: the path's, else ``?c=`` (0 when it is not a small number)."""
    cid = request.path_params.get("cid")
    if isinstance(cid, int):
        return cid
    raw = request.query_params.get("c", "0")
    return int(raw) if raw.isdigit() and len(raw) < 6 else 0


def html(dash: Dashboard, request: Request, session: Session, template: str, title: str,
         status: int = 200, **context: Any) -> HTMLResponse:
    cid = _cid(request)
    known = 0 <= cid < len(dash.settings.clusters)
    body = render(
        template, title=title, page=template, cid=cid, nav=NAV,
        cluster=dash.settings.clusters[cid] if known else None,
        clusters=list(enumerate(dash.settings.clusters)), account=session.account,
        csrf=session.csrf, flash=session.take_flash(), can_act=dash.can_act(session),
        when=when, pct=pct, perm=perm_text, **context)
    return HTMLResponse(body, status)


def error_page(dash: Dashboard, request: Request, session: Session, message: str,
               status: int) -> HTMLResponse:
    return html(dash, request, session, "error", "Error", status, message=message)


def _need_act(dash: Dashboard, session: Session) -> None:
    if not dash.can_act(session):
        raise Forbidden("this account may only look (it is not an admin account)")


def _back(session: Session, to: str, flash: str) -> Response:
    session.flash = flash
    return RedirectResponse(to, 303)


# ------------------------------------------------------------------ login


async def home(dash: Dashboard, request: Request, session: Session) -> Response:
    return RedirectResponse("/c/0/cluster", 303)


async def pick(dash: Dashboard, request: Request, session: Session) -> Response:
    cid = int_field(dict(request.query_params), "c", 0, len(dash.settings.clusters) - 1, 0)
    return RedirectResponse(f"/c/{cid}/cluster", 303)


async def login_form(dash: Dashboard, request: Request, session: Session) -> Response:
    return html(dash, request, session, "login", "Log in")


async def login(dash: Dashboard, request: Request, session: Session) -> Response:
    form = request.state.form
    ak, sk = form.get("accessKey", "").strip(), form.get("secretKey", "")
    account = await dash.verify(ak, sk) if ak and sk and len(ak) <= 256 and len(sk) <= 256 \
        else None
    if account is None:
        session.flash = "wrong account: the cluster refused it"
        return html(dash, request, session, "login", "Log in", 401)
    fresh = dash.sessions.login(session, account, time.monotonic())
    return with_cookie(RedirectResponse("/c/0/cluster", 303), fresh)


async def logout(dash: Dashboard, request: Request, session: Session) -> Response:
    dash.sessions.drop(session.sid)
    return RedirectResponse("/login" if dash.settings.acl else "/", 303)


# ------------------------------------------------------------------ cluster, replication


async def cluster(dash: Dashboard, request: Request, session: Session) -> Response:
    admin = await dash.admin(_cid(request), session)
    rows = await gather.brokers(admin)
    return html(dash, request, session, "cluster", "Cluster", brokers=rows)


async def live_cluster(admin: Admin, request: Request) -> dict[str, Any]:
    rows = await gather.brokers(admin)
    values: dict[str, Any] = {}
    for r in rows:
        values[f"in:{r.key}"] = f"{r.put_tps:.1f}"
        values[f"out:{r.key}"] = f"{r.get_tps:.1f}"
        values[f"max:{r.key}"] = r.max_offset
    return {"values": values,
            "charts": {"tps": {r.key: r.put_tps for r in rows if r.broker_id == 0}}}


async def replication(dash: Dashboard, request: Request, session: Session) -> Response:
    admin = await dash.admin(_cid(request), session)
    groups = gather.replication(await gather.brokers(admin))
    ref = dash.cluster(_cid(request))
    sync = (await gather.sync_states(ref.controller_addr, groups, dash.settings.cluster_secret)
            if ref.controller_addr else None)
    return html(dash, request, session, "replication", "Replication", groups=groups,
                sync=sync)


async def live_replication(admin: Admin, request: Request) -> dict[str, Any]:
    groups = gather.replication(await gather.brokers(admin))
    values: dict[str, Any] = {}
    for g in groups:
        if g.master is not None:
            values[f"max:{g.master.key}"] = g.master.max_offset
        for r in g.replicas:
            values[f"off:{r.broker_name}/{r.broker_id}"] = r.offset
            values[f"lag:{r.broker_name}/{r.broker_id}"] = (
                "-" if r.lag_bytes is None else r.lag_bytes)
    return {"values": values, "charts": {"lag": gather.lag_series(groups)}}


# ------------------------------------------------------------------ topics


async def _cluster_names(admin: Admin) -> list[str]:
    return sorted((await admin.cluster_list()).cluster_addr_table)


async def topics(dash: Dashboard, request: Request, session: Session) -> Response:
    admin = await dash.admin(_cid(request), session)
    got = await gather.gather_all({"topics": functools.partial(gather.topics_or_empty, admin),
                                   "clusters": functools.partial(_cluster_names, admin)})
    names, clusters = got["topics"], got["clusters"]
    if isinstance(names, str) or isinstance(clusters, str):
        raise MQClientError(names if isinstance(names, str) else str(clusters))
    return html(dash, request, session, "topics", "Topics",
                topics=[(t, gather.topic_kind(t)) for t in names], cluster_names=clusters,
                page_rows=TABLE_PAGE_ROWS)


def _topic_name(value: str) -> str:
    problem = validate_topic(value)
    if problem:
        raise FormError(problem)
    return value


async def topic(dash: Dashboard, request: Request, session: Session) -> Response:
    name = _topic_name(request.path_params["topic"])
    admin = await dash.admin(_cid(request), session)
    detail = await gather.topic_detail(admin, name)
    addrs = {bd.broker_name: ", ".join(f"{i}={a}" for i, a in sorted(bd.broker_addrs.items()))
             for bd in detail["route"].broker_datas}
    return html(dash, request, session, "topic", f"Topic {name}", topic=name, addrs=addrs,
                cluster_names=await _cluster_names(admin), **detail)


async def topic_update(dash: Dashboard, request: Request, session: Session) -> Response:
    _need_act(dash, session)
    form = request.state.form
    name = _topic_name(form.get("topic", "").strip())
    admin = await dash.admin(_cid(request), session)
    cluster_name = form.get("cluster", "")
    if cluster_name not in await _cluster_names(admin):
        raise FormError(f"no cluster {cluster_name!r}")
    addrs = await admin.update_topic(
        name, cluster=cluster_name,
        read_queue_nums=int_field(form, "readQueueNums", 1, 1024, 8),
        write_queue_nums=int_field(form, "writeQueueNums", 1, 1024, 8),
        perm=int_field(form, "perm", 2, 6, 6), order=form.get("order") == "true")
    return _back(session, f"/c/{_cid(request)}/topic/{name}",
                 f"topic {name} saved on {', '.join(addrs)}")


async def topic_delete(dash: Dashboard, request: Request, session: Session) -> Response:
    _need_act(dash, session)
    name = _topic_name(request.path_params["topic"])
    admin = await dash.admin(_cid(request), session)
    cluster_name = request.state.form.get("cluster", "")
    if cluster_name not in await _cluster_names(admin):
        raise FormError(f"no cluster {cluster_name!r}")
    await admin.delete_topic(name, cluster_name)
    return _back(session, f"/c/{_cid(request)}/topics", f"topic {name} deleted")


# ------------------------------------------------------------------ consumer groups


def _group_name(value: str) -> str:
    problem = validate_group(value)
    if problem:
        raise FormError(problem)
    return value


async def groups(dash: Dashboard, request: Request, session: Session) -> Response:
    admin = await dash.admin(_cid(request), session)
    rows, errors = await gather.group_list(admin)
    return html(dash, request, session, "groups", "Consumer groups", groups=rows,
                errors=errors, page_rows=TABLE_PAGE_ROWS)


async def group(dash: Dashboard, request: Request, session: Session) -> Response:
    name = _group_name(request.path_params["group"])
    admin = await dash.admin(_cid(request), session)
    d = await gather.group_detail(admin, name)
    topics_ = [t for t in d.topics if not t.startswith(gather.RETRY_PREFIX)]
    return html(dash, request, session, "group", f"Consumer group {name}", d=d,
                topics=topics_ or list(d.topics))


async def live_group(admin: Admin, request: Request) -> dict[str, Any]:
    d = await gather.group_detail(admin, _group_name(request.path_params["group"]))
    values: dict[str, Any] = {"total": d.total_lag}
    for q in d.queues:
        k = f"{q.queue.topic}/{q.queue.broker_name}/{q.queue.queue_id}"
        values[f"b:{k}"] = q.broker_offset
        values[f"c:{k}"] = q.consumer_offset
        values[f"lag:{k}"] = q.diff
    return {"values": values, "charts": {"lag": {"total lag": d.total_lag}}}


async def group_reset(dash: Dashboard, request: Request, session: Session) -> Response:
    _need_act(dash, session)
    name = _group_name(request.path_params["group"])
    form = request.state.form
    topic_name = _topic_name(form.get("topic", ""))
    ts = reset_timestamp(form.get("to", ""), form.get("time", ""))
    admin = await dash.admin(_cid(request), session)
    moved = await admin.reset_offset_by_time(name, topic_name, ts)
    return _back(session, f"/c/{_cid(request)}/group/{name}",
                 f"offsets of {name} on {topic_name} reset ({len(moved)} queues)")


# ------------------------------------------------------------------ messages


async def messages(dash: Dashboard, request: Request, session: Session) -> Response:
    q = {k: request.query_params.get(k, "").strip()
         for k in ("topic", "key", "id", "broker", "queue", "offset")}
    searched = any(q.values())
    found: list[Any] = []
    error = None
    if searched:
        admin = await dash.admin(_cid(request), session)
        try:
            if q["topic"]:
                _topic_name(q["topic"])
            found = await gather.query_messages(
                admin, topic=q["topic"], key=q["key"][:256], msg_id=q["id"][:64],
                broker=q["broker"][:128],
                queue_id=int_field(q, "queue", 0, 1023) if q["queue"] else None,
                offset=int_field(q, "offset", 0, 2**63 - 1) if q["offset"] else None,
                limit=MAX_MESSAGES_LISTED)
        except (MQClientError, FormError) as exc:
            error = str(exc)
    return html(dash, request, session, "messages", "Messages", q=q, searched=searched,
                messages=found, error=error)


async def _one_message(dash: Dashboard, request: Request, session: Session) -> Any:
    msg_id = request.path_params["msg_id"]
    if not gather.is_offset_id(msg_id):
        raise FormError("not a broker message id")
    admin = await dash.admin(_cid(request), session)
    found = await admin.query_msg_by_id(msg_id)
    if not found:
        raise LookupError(f"message {msg_id} not found")
    return admin, found[0]


async def message(dash: Dashboard, request: Request, session: Session) -> Response:
    trace_topic = _topic_name(request.query_params.get("trace", DEFAULT_TRACE_TOPIC))
    admin, m = await _one_message(dash, request, session)
    dlq = m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
    trace = await gather.message_trace(admin, m.msg_id, trace_topic)
    stored_on = m.queue.broker_name or await gather.broker_name_at(
        admin, f"{m.store_host[0]}:{m.store_host[1]}")
    return html(dash, request, session, "message", f"Message {m.msg_id}", m=m,
                trace=trace, trace_topic=trace_topic, stored_on=stored_on,
                props=sorted(m.properties.items()),
                body=body_views(m.body, MAX_BODY_SHOWN, MAX_HEX_SHOWN), dlq=dlq,
                origin=m.properties.get(MessageConst.PROPERTY_RETRY_TOPIC, ""),
                origin_group=m.topic[len(DLQ_GROUP_TOPIC_PREFIX):])


async def resend(dash: Dashboard, request: Request, session: Session) -> Response:
    """A dead letter sent again to the topic it first went to (RETRY_TOPIC), with its body,
    tags, keys and user properties: the group (and any other subscriber) gets it anew."""
    _need_act(dash, session)
    admin, m = await _one_message(dash, request, session)
    origin = m.properties.get(MessageConst.PROPERTY_RETRY_TOPIC, "")
    if not m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX) or not origin:
        raise FormError("only a dead letter (a %DLQ% message with its origin topic) is resent")
    user = {k: v for k, v in m.properties.items() if k not in SYSTEM_PROPERTIES}
    async with Producer(RESEND_GROUP, instance=admin.instance) as producer:
        result = await producer.send(Message(origin, m.body, tags=m.tags, keys=m.keys,
                                             properties=user))
    return _back(session, f"/c/{_cid(request)}/message/{m.offset_msg_id}",
                 f"resent to {origin}: {result.status.name} {result.msg_id}")


# ------------------------------------------------------------------ chaos, ACL


async def chaos(dash: Dashboard, request: Request, session: Session) -> Response:
    runs = chaos_runs.list_runs(dash.settings.chaos_dirs)
    dirs = [str(d) for d in chaos_runs.roots(dash.settings.chaos_dirs)]
    return html(dash, request, session, "chaos", "Chaos runs", runs=runs, dirs=dirs)


async def chaos_run(dash: Dashboard, request: Request, session: Session) -> Response:
    import json

    run = chaos_runs.find_run(dash.settings.chaos_dirs, request.path_params["run_id"])
    if run is None:
        raise LookupError("no such chaos run")
    result = chaos_runs.read_result(run.path)
    audit = result.get("replica_audit") if isinstance(result, dict) else None
    return html(dash, request, session, "chaos_run", f"Chaos run {run.name}", run_id=run.id,
                svg=(run.path / "timeline.svg").is_file(),
                audit=json.dumps(audit, indent=2) if audit else "no replica audit",
                result=json.dumps(result, indent=2) if isinstance(result, dict) else result)


async def chaos_svg(dash: Dashboard, request: Request, session: Session) -> Response:
    run = chaos_runs.find_run(dash.settings.chaos_dirs, request.path_params["run_id"])
    path = run.path / "timeline.svg" if run is not None else None
    if path is None or not path.is_file() or path.stat().st_size > 16 * 1024 * 1024:
        raise LookupError("no timeline for this run")
    return Response(path.read_bytes(), media_type="image/svg+xml",
                    headers={"content-security-policy": "default-src 'none'; style-src "
                             "'unsafe-inline'; sandbox"})


_SAFE_ACCOUNT_KEYS = ("accessKey", "admin", "whiteRemoteAddress", "defaultTopicPerm",
                      "defaultGroupPerm", "topicPerms", "groupPerms")


async def acl(dash: Dashboard, request: Request, session: Session) -> Response:
    """The brokers' ACL accounts, admin only; secret keys are never read into the page."""
    if dash.settings.acl and not dash.can_act(session):
        raise Forbidden("the ACL page is for admin accounts")
    admin = await dash.admin(_cid(request), session)
    configs: list[tuple[str, Any]] = []
    for addr in await admin.master_addrs():
        got = await gather.attempt(functools.partial(admin.acl_config, addr))
        if isinstance(got, str):
            configs.append((addr, got))
            continue
        accounts = [{k: a.get(k, "") for k in _SAFE_ACCOUNT_KEYS}
                    for a in got.get("plainAccessConfigs") or [] if isinstance(a, dict)]
        configs.append((addr, {"white": list(got.get("globalWhiteAddrs") or []),
                               "accounts": accounts}))
    return html(dash, request, session, "acl", "ACL accounts", configs=configs)
