from kdist.cli import main

main()
