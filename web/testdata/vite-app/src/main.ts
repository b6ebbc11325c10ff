// A page that streams a pattern into a list: what a new user writes after
// `npm install @switchyard/client`.
import { connect, type Message } from "@switchyard/client";

interface Order {
  id: number;
}

const list = document.querySelector<HTMLUListElement>("#messages")!;

function show(msg: Message<Order>): void {
  const li = document.createElement("li");
  li.textContent = `${msg.topic} #${msg.offset}: order ${msg.data.id}`;
  list.append(li);
}

export async function main(url: string): Promise<void> {
  const client = await connect(url);
  for await (const msg of client.subscribe<Order>("orders.#")) show(msg);
}

const gateway = new URLSearchParams(location.search).get("gateway");
if (gateway) void main(gateway);
