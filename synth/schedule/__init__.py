"""What a schedule is: the collectives' pre- and postconditions (collectives), the IR
(ir), its file (file), the independent verifier (verify, which imports nothing else of
synth), the alpha-beta cost (cost), and transformations that map schedules onto
schedules: reversal, refinement, composition (transform)."""
