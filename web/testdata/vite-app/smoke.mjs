// Imports the installed package from Node through its exports map and
// checks that the entry points exist.
import * as sy from "@switchyard/client";
import pkg from "@switchyard/client/package.json" with { type: "json" };

for (const name of ["connect", "Client", "Subscription", "MessageStream", "SwitchyardError", "DEFAULTS"]) {
  if (sy[name] === undefined) throw new Error(`@switchyard/client does not export ${name}`);
}
console.log(`${pkg.name}@${pkg.version} ok`);
