import sys

try:  # Ctrl-C while Python imports synth (seconds on a busy machine): one line, 130
    from synth.cli import main
except KeyboardInterrupt:
    sys.stderr.write("synth: interrupted (while starting)\n")
    sys.exit(130)

main()
