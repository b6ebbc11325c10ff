// The README's Node example, as a TypeScript user writes it after
// `npm install @switchyard/client ws @types/ws`; web/package_test.go checks
// it with `tsc --strict` (tsconfig.node.json). It is type-checked, not run.
import WebSocket from "ws";
import { connect } from "@switchyard/client";

const client = await connect("ws://localhost:8080/v1/ws", { WebSocket });
// The Go client's rule: an http URL without a path reaches /v1/ws.
const other = await connect("http://localhost:8080/", { WebSocket, token: "jwt" });
// ws takes headers: the token in an Authorization header, no ticket.
const third = await connect("ws://localhost:8080/v1/ws", { WebSocket, token: "jwt", auth: "header" });

const sub = await client.subscribe("orders.#", (msg) => {
  console.log(msg.topic, msg.offset, msg.data);
});
client.on("topic_deleted", (ev) => console.log(`${ev.topic} was deleted`));
await client.publish("orders.created.eu", { id: 1 });
await sub.unsubscribe();
client.close();
other.close();
third.close();
