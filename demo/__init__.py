"""The `tailcut demo` job: a scripted-model server, a simulated agent fleet and the end-to-end run."""
