// Uses every part of the client's public API with explicit types, so that
// `tsc --noEmit` checks web/switchyard.d.ts against how callers write code.
// It is type-checked, not run.
import {
  connect,
  DEFAULTS,
  MessageStream,
  Subscription,
  SwitchyardError,
  type Client,
  type ClientState,
  type ConnectOptions,
  type From,
  type PresenceEvent,
  type Gap,
  type Message,
  type Payload,
  type PublishResult,
  type Status,
  type TopicDeleted,
  type StreamOptions,
  type SubscribeOptions,
  type Welcome,
} from "@switchyard/client";

interface Order {
  id: number;
  total?: number;
}

export async function everything(url: string): Promise<void> {
  const controller = new AbortController();
  const options: ConnectOptions = {
    token: async () => "jwt",
    reconnect: { minDelayMs: 100, maxDelayMs: 5000 },
    requestTimeoutMs: DEFAULTS.requestTimeoutMs,
    recentGroupRecords: 1024,
    signal: controller.signal,
  };
  const client: Client = await connect(url, options);
  const state: ClientState = client.state;
  const session: string | undefined = client.session;
  const queueMessages: number | undefined = client.limits?.queue_messages;
  console.log(state, session, client.epoch, queueMessages, client.stats.reconnects);

  // Events.
  const offOpen = client.on("open", (w: Welcome) => console.log(w.session, w.limits.max_frame_bytes));
  client.on("close", (ev) => console.log(ev.code, ev.reason, ev.willReconnect));
  client.on("reconnect", (ev) => console.log(ev.attempt, ev.delayMs));
  client.on("gap", (gap: Gap, sub) => console.log(gap.from, gap.to, gap.reason, sub?.pattern));
  client.on("topic_deleted", (ev: TopicDeleted, sub) => console.log(ev.topic, ev.pattern, sub?.state));
  client.on("reset", (ev) => console.log(ev.pattern, ev.group, ev.epoch, ev.subscription.state));
  client.on("error", (err: SwitchyardError) => console.log(err.code, err.closeCode, err.subscription));
  const onState = (s: ClientState) => console.log(s);
  client.on("state", onState);
  client.off("state", onState);
  offOpen();
  client.on("refresh_required", (f) => console.log(f.expires));
  const onJoin = (p: PresenceEvent) => console.log(p.op, p.topic, p.session, p.user, p.info);
  client.on("join", onJoin);
  client.on("leave", onJoin);
  const refreshed: { expires?: string } = await client.refresh("new-jwt");
  console.log(refreshed.expires);
  await connect(url, { getToken: async () => "jwt" });
  await client.subscribe("rooms.lobby", () => undefined, { presence: true });

  // Handler form.
  const froms: From[] = ["latest", "earliest", "last", { time: "2026-11-29T08:00:00Z" }, { last: 5 }, { epoch: "e", positions: [{ topic: "a", partition: 0, offset: 3 }] }];
  const opts: SubscribeOptions = { from: froms[0], on_full: "drop_new", filter: { headers: { region: "eu" } }, signal: controller.signal };
  const sub: Subscription = await client.subscribe<Order>(
    "orders.*.eu",
    (msg, s) => {
      const id: number = msg.data.id;
      console.log(id, msg.topic, msg.partition, msg.offset, msg.key, msg.headers?.region, msg.time, s.pattern);
    },
    opts,
  );
  console.log(sub.state, sub.recovered, sub.duplicates, sub.delivered, sub.positions()[0]?.offset, sub.group);
  await sub.unsubscribe();

  // Group with acks.
  await client.subscribe(
    "jobs.#",
    async (msg: Message) => {
      if (msg.attempt && msg.attempt > 3) await client.nack(msg, new Error("giving up"));
      else await client.ack(msg);
    },
    { group: "workers", from: "earliest" },
  );
  await client.subscribe("jobs.auto", () => undefined, { group: "auto", autoAck: true });

  // Async-iterable form.
  const streamOpts: StreamOptions = { buffer: 64, from: "earliest", signal: controller.signal };
  const stream: MessageStream<Order> = client.subscribe<Order>("orders.#", streamOpts);
  const confirmed: Subscription = await stream.ready;
  console.log(confirmed.pattern, stream.subscription?.state);
  for await (const msg of stream) {
    const total: number | undefined = msg.data.total;
    console.log(total);
    if (msg.offset > 10) break;
  }
  for await (const msg of client.subscribe("jobs.#", { group: "w2", autoAck: true })) {
    console.log(msg.group, msg.attempt);
  }
  await stream.unsubscribe();

  // Publish.
  const res: PublishResult = await client.publish("orders.created.eu", { id: 42 }, { key: "c-7", headers: { region: "eu" }, msg_id: "m-1", priority: 2, signal: AbortSignal.timeout(1000) });
  console.log(res.partition, res.offset, res.duplicate === true);

  // Bytes: published as they are, delivered as a Uint8Array.
  await client.publish("images.raw", new Uint8Array([0xff, 0xd8, 0xff]));
  await client.publish("images.raw", new ArrayBuffer(4));
  await client.subscribe("images.#", (msg: Message) => {
    const data: Payload = msg.data;
    if (msg.encoding === "base64" && data instanceof Uint8Array) console.log(data.byteLength);
  });
  await client.subscribe<Uint8Array>("images.raw", (msg) => {
    const first: number | undefined = msg.data[0];
    console.log(first);
  });

  // Status and shutdown.
  for await (const s of client.status({ signal: controller.signal })) {
    const st: Status = s;
    if (st.state === "reconnecting") console.log(st.attempt, st.delayMs);
    if (st.state === "closed") console.log(st.code, st.error?.code);
  }
  console.log(client.subscriptions().length);
  client.close();
  const why: SwitchyardError | undefined = await client.closed();
  console.log(why?.message);
}

export function helpers(): void {
  const err = new SwitchyardError("timeout", "no reply", { closeCode: 1006 });
  console.log(err.code === "timeout", err.name);
}
