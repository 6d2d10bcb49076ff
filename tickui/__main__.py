from tickui.cli import main

main()
