// The trace page's own script (trace.html). The list page imports pages/trace.js itself, ahead, and runs its
// main() when it opens a trace in place (pages/in_place.js).
import { main } from "./trace.js";

main();
