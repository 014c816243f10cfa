// bench/vs_machine.py's loopback floor: N round trips of a 300-byte request and a 100-byte answer
// over TCP on 127.0.0.1, one in flight, between two processes; prints the wall time and each
// side's CPU time per round trip as one JSON line. What a send/recv/wake-up costs on this machine
// with no runtime around it (compare a broker's CPU per message with it).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(int who){struct rusage r;getrusage(who,&r);return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
static void full(int fd,char*b,int n){int g=0;while(g<n){int k=recv(fd,b+g,n-g,0);if(k<=0)exit(1);g+=k;}}
int main(int argc,char**argv){int n=argc>1?atoi(argv[1]):100000;
 int ls=socket(AF_INET,SOCK_STREAM,0);struct sockaddr_in a={0};a.sin_family=AF_INET;a.sin_addr.s_addr=htonl(0x7f000001);
 bind(ls,(void*)&a,sizeof a);listen(ls,1);socklen_t l=sizeof a;getsockname(ls,(void*)&a,&l);
 char buf[512];memset(buf,1,sizeof buf);int one=1;
 if(fork()==0){int c=accept(ls,0,0);setsockopt(c,IPPROTO_TCP,TCP_NODELAY,&one,4);for(int i=0;i<n;i++){full(c,buf,300);send(c,buf,100,0);}return 0;}
 int s=socket(AF_INET,SOCK_STREAM,0);connect(s,(void*)&a,sizeof a);setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
 double t0=now(),c0=cpu(RUSAGE_SELF);
 for(int i=0;i<n;i++){send(s,buf,300,0);full(s,buf,100);}
 double t1=now(),c1=cpu(RUSAGE_SELF);int st;wait(&st);double cc=cpu(RUSAGE_CHILDREN);
 printf("{\"round_trips\":%d,\"wall_us_per_rt\":%.2f,\"client_cpu_us_per_rt\":%.2f,\"server_cpu_us_per_rt\":%.2f}\n",n,(t1-t0)/n*1e6,(c1-c0)/n*1e6,cc/n*1e6);}
