// Type declarations for the Switchyard JavaScript client
// (web/static/switchyard.js, published as @switchyard/client). They describe
// the module's public API, and only it: the helpers switchyard.js also
// exports for its own tests (splitFrame, backoffDelay, buildURL, RecentSet,
// AsyncQueue) are not part of it. web/testdata/vite-app/src/usage.ts uses
// every part of it and is checked with `tsc --noEmit` under `strict`, and
// web/testdata/vite-app/node/example.ts checks the README's Node example
// with the `ws` package.

/** Any JSON value: what `data` of a record may hold. */
export type JSONValue = string | number | boolean | null | JSONValue[] | { [key: string]: JSONValue };

/**
 * What `data` of a delivered record holds: its JSON value, or, for a record
 * whose bytes are not JSON (`encoding` "base64"), the bytes.
 */
export type Payload = JSONValue | Uint8Array;

/** Defaults every option of {@link connect} falls back to. */
export declare const DEFAULTS: Readonly<{
  /** First reconnect delay, before jitter (250). */
  minDelayMs: number;
  /** Largest reconnect delay, before jitter (10000). */
  maxDelayMs: number;
  /** How long a request (and the wait for `welcome`) may take (10000). */
  requestTimeoutMs: number;
  /** How many handled group records are remembered for duplicate detection (4096). */
  recentGroupRecords: number;
  /** How many messages a subscription iterated with `for await` buffers (1024). */
  streamBuffer: number;
  /** After how long without a frame the client sends a `ping` op (15000). */
  pingIntervalMs: number;
  /** How long after a ping a frame must arrive before the connection counts as dead (10000). */
  pongTimeoutMs: number;
  /** The largest payload a delta message may claim (67108864, 64 MiB); a larger claim is a `bad_delta`. */
  maxDeltaBytes: number;
}>;

/**
 * Error codes of the protocol (docs/protocol.md) and of the client itself
 * (`timeout`, `disconnected`, `closed`, `connect_failed`, `aborted`, ...).
 * Other strings may come from newer servers.
 */
export type ErrorCode =
  | "bad_request"
  | "invalid_topic"
  | "invalid_pattern"
  | "unknown_topic"
  | "unauthorized"
  | "forbidden"
  | "rate_limited"
  | "backpressure"
  | "message_too_large"
  | "too_many_subscriptions"
  | "not_subscribed"
  | "group_conflict"
  | "shutting_down"
  | "internal"
  | "timeout"
  | "disconnected"
  | "closed"
  | "connect_failed"
  | "aborted"
  | "already_subscribed"
  | "not_a_group_message"
  | "handler_failed"
  | "bad_frame"
  | "bad_delta"
  | (string & {});

/** An error reported by the server or by the client library. */
export declare class SwitchyardError extends Error {
  constructor(code: ErrorCode, message?: string, details?: Record<string, unknown>);
  readonly name: "SwitchyardError";
  /** Machine-readable error code. */
  code: ErrorCode;
  /** The WebSocket close code, for `disconnected`, `connect_failed`, `unauthorized` and `closed`. */
  closeCode?: number;
  /** The server's error frame, when the server reported the error. */
  frame?: Record<string, unknown>;
  /** The subscription a failed (re)subscribe or handler belongs to. */
  subscription?: Subscription;
  /** The unparsable line, for `bad_frame`. */
  line?: string;
  /** What caused it: a handler's exception, an AbortSignal's reason. */
  cause?: unknown;
}

/** A position in one partition of a topic: the last offset seen there. */
export interface Position {
  topic: string;
  partition: number;
  offset: number;
}

/** Where delivery starts. */
export type From =
  | "latest"
  | "earliest"
  | "last"
  | { time: string }
  | { last: number }
  | { epoch: string; positions: Position[] };

/** The server's limits for this session, from `welcome`. */
export interface Limits {
  max_frame_bytes: number;
  max_subscriptions: number;
  queue_messages: number;
  max_message_bytes?: number;
  publish_rate?: number;
  [key: string]: unknown;
}

/** The server's first frame on every connection. */
export interface Welcome {
  op: "welcome";
  session: string;
  epoch: string;
  limits: Limits;
  [key: string]: unknown;
}

/** One delivered record (a `message` frame). */
export interface Message<T = Payload> {
  op: "message";
  /** The pattern of the subscription this delivery belongs to. */
  pattern: string;
  topic: string;
  partition: number;
  offset: number;
  key?: string;
  headers?: Record<string, string>;
  /**
   * The record's JSON value; a Uint8Array of its bytes when `encoding` is
   * "base64" (a record whose bytes are not JSON, such as one published
   * from a Uint8Array). A type argument other than the default asserts
   * what the topic carries.
   */
  data: T;
  /** "base64" when the record's bytes are not JSON: `data` is then a Uint8Array. */
  encoding?: "base64";
  /** Append time, RFC 3339 UTC with milliseconds. */
  time: string;
  /** Consumer-group deliveries only. */
  group?: string;
  /** Consumer-group deliveries only; 1 on the first. */
  attempt?: number;
}

/** Offsets `[from, to)` of a partition that a subscription did not receive. */
export interface Gap {
  op: "gap";
  pattern: string;
  group?: string;
  topic: string;
  partition: number;
  from: number;
  to: number;
  /** `queue_full`, `retention`, or `client_queue_full` (a stream's buffer was full). */
  reason: "queue_full" | "retention" | "client_queue_full" | (string & {});
}

/** The `published` reply. */
export interface PublishResult {
  topic: string;
  partition: number;
  offset: number;
  duplicate?: boolean;
}

/** Where a message a handler or loop got from a group subscription came from. */
export interface GroupDelivery {
  group?: string;
  pattern?: string;
  topic: string;
  partition: number;
  offset: number;
}

export type OnFull = "drop_old" | "drop_new" | "disconnect";

/** Options of {@link Client.subscribe}. */
export interface SubscribeOptions {
  /** Join this consumer group. */
  group?: string;
  /** Where delivery starts (server default: latest for plain, earliest for a new group). */
  from?: From;
  /** Plain only: what a full outbound queue on the server does. */
  on_full?: OnFull;
  /** Deliver only records whose headers hold every given pair. */
  filter?: { headers: Record<string, string> };
  /**
   * Group only: with a handler, ack when it returns (or its promise
   * resolves) and nack when it throws; without one, ack each message when
   * the loop asks for the next.
   */
  autoAck?: boolean;
  /** Unsubscribes when it fires; a subscribe not yet confirmed rejects with `aborted`. */
  signal?: AbortSignal;
  /** Plain only: announce this session on the matched topics and receive `join` / `leave` events. */
  presence?: boolean;
  /**
   * Plain only: `"fossil"` asks for delta-compressed messages; the client
   * applies each delta before the handler sees it. Over SSE the stream
   * asks for deltas (`delta=fossil`, which covers all its patterns) when
   * every subscription asked for them; otherwise messages come full.
   * A delta that does not apply emits an `error` (`bad_delta`) and the
   * client reconnects, resuming with full messages.
   */
  delta?: "fossil";
}

/** The server asks for a new token before the current one expires. */
export interface RefreshRequired {
  op: "refresh_required";
  /** RFC 3339. */
  expires: string;
}

/** A presence change on a topic subscribed to with `presence: true`. */
export interface PresenceEvent {
  op: "join" | "leave";
  topic: string;
  session: string;
  user: string;
  info?: JSONValue;
}

/**
 * The server dropped `join`/`leave` frames to this client (it read them too
 * slowly); the client listed the topic again. Replace what earlier events
 * built with `members`; later events apply to it.
 */
export interface PresenceResync {
  op: "presence";
  resync: true;
  topic: string;
  count: number;
  members: Array<{ session: string; user: string; info?: JSONValue }>;
}

/** Options of the async-iterable form of {@link Client.subscribe}. */
export interface StreamOptions extends SubscribeOptions {
  /** How many messages wait for the loop (default {@link DEFAULTS}.streamBuffer). */
  buffer?: number;
}

/** Options of {@link Client.publish}. */
export interface PublishOptions {
  /** Partitioning key: one key, one partition, in order. */
  key?: string;
  headers?: Record<string, string>;
  /** Idempotency key: a repeat within the dedupe window is stored once. */
  msg_id?: string;
  /** 0 (lowest) to 3; default 1. */
  priority?: 0 | 1 | 2 | 3;
  /** Rejects with `aborted` when it fires before the reply. */
  signal?: AbortSignal;
}

/** Options of {@link connect}. */
export interface ConnectOptions {
  /**
   * Auth token, never put in a URL: over a WebSocket it is traded for a
   * one-use ticket before every attempt (see `auth`); over SSE it goes in an
   * `Authorization: Bearer` header. A function is asked before every attempt.
   */
  token?: string | (() => string | Promise<string>);
  /**
   * How a WebSocket attempt carries the token. `"ticket"` (default): the
   * client asks `POST /v1/tickets` (token in an `Authorization` header,
   * through `fetch`) for a one-use ticket and opens `?ticket=`. `"header"`:
   * the WebSocket constructor gets `{ headers: { Authorization } }` as its
   * third argument (Node's `ws` package takes it); no ticket is needed.
   */
  auth?: "ticket" | "header";
  /**
   * Async token source used instead of `token`: called before every
   * connection attempt and when the server sends `refresh_required`, whose
   * answer refreshes the open session without reconnecting.
   */
  getToken?: () => Promise<string>;
  /** Backoff settings; `false` disables reconnecting. */
  reconnect?: false | { minDelayMs?: number; maxDelayMs?: number };
  /** Timeout of every request and of the wait for `welcome`. */
  requestTimeoutMs?: number;
  /** Size of the duplicate filter for group deliveries. */
  recentGroupRecords?: number;
  /**
   * After this long without a frame the client sends a `ping` op to check
   * that the connection is alive; 0 turns the check off. Default 15000.
   */
  pingIntervalMs?: number;
  /**
   * A ping without any frame arriving within this long closes the
   * connection as dead (close code 4000), and the client reconnects.
   * Default 10000.
   */
  pongTimeoutMs?: number;
  /**
   * The largest payload a delta message may claim; the claim is checked
   * before the payload is allocated, and a larger one is a `bad_delta`
   * (reported, then the client reconnects). Default 67108864 (64 MiB).
   */
  maxDeltaBytes?: number;
  /** WebSocket constructor to use instead of `globalThis.WebSocket`. */
  WebSocket?: WebSocketConstructor;
  /**
   * Transports tried in order for the first connection; default
   * `["websocket", "sse"]` where `EventSource` exists, else `["websocket"]`.
   * Over `"sse"` the client receives from `/v1/sse` and publishes with
   * `POST /v1/publish`; groups, refresh and presence are `unsupported`.
   */
  transports?: Array<"websocket" | "sse">;
  /** EventSource constructor for the SSE transport; default `globalThis.EventSource`. */
  EventSource?: EventSourceConstructor;
  /** fetch for tickets, and for reading and publishing over the SSE transport; default `globalThis.fetch`. */
  fetch?: FetchLike;
  /** The client's lifetime: a pending connect rejects with `aborted`, an open client closes. */
  signal?: AbortSignal;
}

/**
 * An event handler property that any implementation's handler fits: the
 * client assigns its own handler and reads only the fields named here, so
 * the parameter is checked bivariantly, as a method's is (the `ws`
 * package's handlers take its richer event types).
 */
type HandlerSlot<E> = { bivarianceHack(ev: E): void }["bivarianceHack"] | null;

/** What the client needs of a WebSocket implementation (the browser's, or e.g. the `ws` package's). */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onmessage: HandlerSlot<{ data: unknown }>;
  onclose: HandlerSlot<{ code?: number; reason?: string }>;
  onerror: HandlerSlot<unknown>;
}
/**
 * A WebSocket constructor. The client passes only the URL, except with
 * `auth: "header"`, where it also passes no subprotocols and the headers
 * (as the `ws` package takes them).
 */
export type WebSocketConstructor = new (url: string, protocols?: string[], options?: { headers: Record<string, string> }) => WebSocketLike;

/** What the SSE transport needs of an EventSource implementation (the browser's, or a polyfill). */
export interface EventSourceLike {
  readonly readyState: number;
  onmessage: HandlerSlot<{ data: string; lastEventId: string }>;
  addEventListener(type: string, listener: (ev: { data?: unknown }) => void): void;
  close(): void;
}
export type EventSourceConstructor = new (url: string) => EventSourceLike;

/** What the SSE transport needs of fetch, to publish. */
export type FetchLike = (
  url: string,
  init: { method: string; headers: Record<string, string>; body: string },
) => Promise<{ ok: boolean; status: number; json(): Promise<unknown> }>;

export type ClientState = "connecting" | "open" | "reconnecting" | "closed";

/** One entry of {@link Client.status}. */
export type Status =
  | { state: "open"; session: string; epoch: string }
  | { state: "reconnecting"; attempt: number; delayMs: number; code?: number; reason?: string }
  | { state: "closed"; code: number; reason: string; error?: SwitchyardError };

export interface CloseEvent {
  code: number;
  reason: string;
  willReconnect: boolean;
}

export interface ResetEvent {
  subscription: Subscription;
  pattern: string;
  group?: string;
  epoch: string;
}

/** The `topic_deleted` frame: a topic matched by `pattern` was deleted. */
export interface TopicDeleted {
  op: "topic_deleted";
  pattern: string;
  topic: string;
}

/** Listener signatures of {@link Client.on}. */
export interface ClientEvents {
  open: (welcome: Welcome) => void;
  close: (ev: CloseEvent) => void;
  reconnect: (ev: { attempt: number; delayMs: number }) => void;
  gap: (gap: Gap, subscription: Subscription | undefined) => void;
  /** A topic the subscription matched was deleted; the subscription stays open. */
  topic_deleted: (ev: TopicDeleted, subscription: Subscription | undefined) => void;
  reset: (ev: ResetEvent) => void;
  error: (err: SwitchyardError) => void;
  state: (state: ClientState) => void;
  refresh_required: (frame: RefreshRequired) => void;
  join: (frame: PresenceEvent) => void;
  leave: (frame: PresenceEvent) => void;
  presence: (frame: PresenceResync) => void;
  /** The first connection falls back to the next transport. */
  transport: (ev: { transport: "websocket" | "sse"; code: number; reason: string }) => void;
}

export type Handler<T = Payload> = (msg: Message<T>, sub: Subscription) => unknown;

/** A subscription to a pattern, optionally as a member of a consumer group. */
export declare class Subscription {
  private constructor();
  readonly pattern: string;
  readonly group: string | undefined;
  state: "pending" | "active" | "closed";
  /** From the last `subscribed` reply that carried it: whether a resume from positions succeeded. */
  recovered: boolean | undefined;
  /** Duplicate deliveries dropped so far. */
  duplicates: number;
  /** Records handed to the handler so far. */
  delivered: number;
  /** The last delivered position on every (topic, partition), as `from.positions` expects. */
  positions(): Position[];
  /** Ends the subscription. */
  unsubscribe(): Promise<void>;
}

/** The messages of one subscription as an async iterable. Leaving the loop unsubscribes. */
export declare class MessageStream<T = Payload> implements AsyncIterableIterator<Message<T>> {
  private constructor();
  /** The subscription being iterated; null when refused at once. */
  readonly subscription: Subscription | null;
  /** Resolves once the server confirmed the subscription; rejects when it refused. */
  readonly ready: Promise<Subscription>;
  next(): Promise<IteratorResult<Message<T>, undefined>>;
  return(): Promise<IteratorResult<Message<T>, undefined>>;
  /** Ends the subscription; the loop ends after the buffered messages. */
  unsubscribe(): Promise<void>;
  [Symbol.asyncIterator](): MessageStream<T>;
}

/** A connection to a Switchyard gateway that reconnects by itself. Create it with {@link connect}. */
export declare class Client {
  private constructor();
  state: ClientState;
  /** The transport in use or being tried. */
  transport: "websocket" | "sse";
  /** Session id from the last `welcome`. */
  session: string | undefined;
  /** Log epoch from the last `welcome`. */
  epoch: string | undefined;
  /** Limits from the last `welcome`. */
  limits: Limits | undefined;
  /** Counters, for display and tests. */
  stats: { reconnects: number; duplicates: number; gaps: number };

  /** Registers a listener; returns a function that removes it. */
  on<E extends keyof ClientEvents>(event: E, fn: ClientEvents[E]): () => void;
  /** Removes a listener added with on. */
  off<E extends keyof ClientEvents>(event: E, fn: ClientEvents[E]): void;
  /** Resolves once closed for good: undefined after close(), else the error that ended the client. */
  closed(): Promise<SwitchyardError | undefined>;
  /** The connection's states as an async iterable, ending after `closed`. */
  status(opts?: { signal?: AbortSignal }): AsyncIterableIterator<Status>;

  /**
   * Presents a new token on the open session; resolves once the server
   * accepted it. Rejects with `unauthorized` or `forbidden` (the session
   * keeps its old token).
   */
  refresh(token: string): Promise<{ expires?: string }>;

  /**
   * Who is present on a topic (sessions subscribed to it with
   * `presence: true`); rejects with `forbidden` without a subscribe grant.
   */
  presence(topic: string): Promise<{ topic: string; count: number; members: Array<{ session: string; user: string; info?: JSONValue }> }>;

  /** Subscribes with a handler; resolves once the server confirms. */
  subscribe<T = Payload>(pattern: string, handler: Handler<T>, opts?: SubscribeOptions): Promise<Subscription>;
  /** Subscribes without a handler: iterate the result with `for await`. */
  subscribe<T = Payload>(pattern: string, opts?: StreamOptions): MessageStream<T>;

  /**
   * Publishes one record; resolves with where it was stored. Bytes (a
   * Uint8Array, a Buffer, another ArrayBuffer view or an ArrayBuffer) are
   * stored as they are, sent with `"encoding":"base64"`; any other value is
   * stored as its JSON.
   */
  publish(topic: string, data: unknown, opts?: PublishOptions): Promise<PublishResult>;
  /** Acknowledges a consumer-group delivery. */
  ack(msg: GroupDelivery): Promise<Record<string, unknown>>;
  /** Rejects a consumer-group delivery: redelivered after a backoff, or dead-lettered. */
  nack(msg: GroupDelivery, error?: string | Error): Promise<Record<string, unknown>>;
  /** All current subscriptions. */
  subscriptions(): Subscription[];
  /** Closes the connection for good. */
  close(): void;
}

/**
 * Connects to a gateway; resolves once the server's `welcome` arrives. `url`
 * follows the Go client's rule: `ws://`, `wss://`, `http://` or `https://`
 * (mapped to ws(s)), or a path resolved against the page; an empty path or
 * `/` means `/v1/ws`. Any other URL rejects with `bad_request`.
 */
export declare function connect(url: string, options?: ConnectOptions): Promise<Client>;

// Only the declarations marked export above are the package's API.
export {};
