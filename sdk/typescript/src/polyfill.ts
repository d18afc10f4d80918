// Symbol.asyncDispose and Symbol.dispose for Node versions without them
// (18 before 18.18), so that `await using` works with this SDK's handles.

const S = Symbol as unknown as { asyncDispose?: symbol; dispose?: symbol };
if (!S.asyncDispose) Object.defineProperty(Symbol, "asyncDispose", { value: Symbol.for("nodejs.asyncDispose") });
if (!S.dispose) Object.defineProperty(Symbol, "dispose", { value: Symbol.for("nodejs.dispose") });

export {};
