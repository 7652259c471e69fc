from acceltrace.cli import run

run()
